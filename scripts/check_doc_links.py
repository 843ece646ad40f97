#!/usr/bin/env python3
"""Checks every relative markdown link and image in README.md and docs/*.md: the file must exist and a
#anchor must match a heading of the target file (GitHub's slugs: lowercase, spaces to '-',
punctuation other than '-' and '_' dropped, repeats numbered -1, -2, ...). Exits 1 listing the
broken links, 0 when all resolve. Usage: scripts/check_doc_links.py [REPO_ROOT]"""
import re
import sys
from pathlib import Path

LINK = re.compile(r'!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')  # images too
HEADING = re.compile(r'^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$')


def slug(text):
    text = re.sub(r'<[^>]+>', '', text).strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def outside_code(lines):
    """Yields (line number, line) of the lines outside fenced code blocks."""
    fence = None
    for n, line in enumerate(lines, 1):
        m = re.match(r'^ {0,3}(`{3,}|~{3,})', line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def anchors(path, cache={}):
    if path not in cache:
        seen, result = {}, set()
        for _, line in outside_code(path.read_text(encoding='utf-8').splitlines()):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            result.add(s if k == 0 else f'{s}-{k}')
        cache[path] = result
    return cache[path]


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    files = [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))
    broken, count = [], 0
    for md in files:
        if not md.is_file():
            continue
        for n, line in outside_code(md.read_text(encoding='utf-8').splitlines()):
            line = re.sub(r'`[^`]*`', lambda m: ' ' * len(m.group(0)) if '](' not in m.group(0) else m.group(0), line)
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):  # http:, https:, mailto:
                    continue
                count += 1
                file_part, _, anchor = target.partition('#')
                dest = (md.parent / file_part).resolve() if file_part else md
                where = f'{md.relative_to(root)}:{n}: {target}'
                if not dest.exists():
                    broken.append(f'{where}: no such file')
                elif anchor and dest.suffix == '.md' and anchor not in anchors(dest):
                    broken.append(f'{where}: no heading with anchor #{anchor} in {dest.relative_to(root)}')
    for b in broken:
        print(b)
    print(f'check_doc_links: {count} relative link(s) in {len(files)} file(s), {len(broken)} broken',
          file=sys.stderr)
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())
