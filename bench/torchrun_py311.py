"""torchrun (Debian's torch 1.13) with one fix so it runs on Python 3.11, and nothing else changed.

torch 1.13's `Std.from_str` looks the parsed value up by iterating the `Std` IntFlag; on Python
3.11 iteration no longer yields the zero member `Std.NONE`, so "0" (the default for --redirects and
--tee) parses to None and torchrun crashes before starting any worker. This wrapper replaces that
one parser with one that constructs the flag directly, then runs torchrun's own main().
Usage: /usr/bin/python3 bench/torchrun_py311.py [torchrun args...]
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(k): cls(int(v)) for k, v in (item.split(":") for item in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (must come after the fix)

if __name__ == "__main__":
    sys.exit(main())
