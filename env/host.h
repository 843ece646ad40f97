// Host names from user input: the one rule every flag, variable and file that names a host is
// checked against (--cluster_node_ips, --node_ip, --master_addr, --master, --rdzv_endpoint,
// --servers/--workers, PaddleCloud's PADDLE_TRAINERS and POD_IP, every host:port list of the
// environment contract, Slurm's node lists after expansion, MASTER_ADDR, a rank mapping file's
// "ip" entries). A host that passes can be put into a host:port endpoint, a log line or a command
// without quoting: `$(id)`, spaces and colons never do.
#pragma once

#include <string>
#include <string_view>

namespace ddl::env {

// What a valid host is, for messages: "'x y' is not " + kHostRule.
inline constexpr std::string_view kHostRule =
    "an IPv4 address or host name (letters, digits, '-', '_' and dots; at most 253 characters)";

// True for a dotted-quad IPv4 address ("10.0.0.1"), or a host name in the manner of RFC 1123:
// labels of 1..63 letters, digits, '-' (not first or last) and '_' (which cluster schedulers
// put in node names), separated by single dots, 253 characters at most. A name of digits and
// dots only must be a valid IPv4 address ("10.0.0" is not a host). IPv6 literals are not
// accepted: endpoints are written host:port without brackets throughout the contract.
bool is_valid_host(std::string_view host);

// Throws EnvError "<what>='<value>': '<host>' is not <kHostRule>" unless
// is_valid_host(host); `value` is the whole text the host came from (a list, an endpoint),
// `what` the variable or flag that gave it. Returns `host`.
std::string check_host(std::string_view host, std::string_view what, std::string_view value);

// This machine's host name (gethostname); "" when it cannot be read.
std::string this_host_name();

}  // namespace ddl::env
