// env/host.h: the one host name rule, and the endpoints of the contract that use it.
#include "env/host.h"

#include <gtest/gtest.h>

#include <string>

#include "env/contract.h"

namespace ddl::env {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Host, AcceptsAddressesAndNamesSchedulersUse) {
  for (const char* host : {"10.0.0.1", "127.0.0.2", "localhost", "node-1", "n1", "gpu08.cluster",
                           "node_1", "a.b-c.d", "x"}) {
    EXPECT_TRUE(is_valid_host(host)) << host;
  }
  EXPECT_TRUE(is_valid_host(std::string(63, 'a') + "." + std::string(63, 'b')));
}

TEST(Host, RefusesWhatIsNoHost) {
  for (const char* host : {"", "$(id)", "`id`", "a b", "a;b", "10.0.0", "10.0.0.256", "-a", "a-",
                           "a..b", ".a", "a.", "a/b", "a:1", "::1", "h\n", "*"}) {
    EXPECT_FALSE(is_valid_host(host)) << host;
  }
  EXPECT_FALSE(is_valid_host(std::string(64, 'a'))) << "a label of 64 characters";
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefgh.";
  EXPECT_FALSE(is_valid_host(long_name.substr(0, 254))) << "254 characters";
  EXPECT_FALSE(is_valid_host(std::string("a\0b", 3)));
}

TEST(Host, CheckNamesTheVariableAndTheValue) {
  EXPECT_EQ(check_host("n1", "X", "n1,n2"), "n1");
  try {
    check_host("$(id)", "PADDLE_TRAINERS", "10.0.0.1,$(id)");
    FAIL() << "$(id) is no host";
  } catch (const EnvError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "PADDLE_TRAINERS='10.0.0.1,$(id)': '$(id)' is not an IPv4 "
                         "address or host name"))
        << e.what();
  }
  try {
    check_host("a b", "POD_IP", "a b");
    FAIL() << "'a b' is no host";
  } catch (const EnvError& e) {
    EXPECT_TRUE(contains(e.what(), "POD_IP='a b': not an IPv4 address or host name")) << e.what();
  }
}

TEST(Host, EndpointsCheckTheirHosts) {
  EXPECT_EQ(parse_endpoint("node_1:80", "X").host, "node_1");
  EXPECT_THROW(parse_endpoint("$(id):80", "X"), EnvError);
  try {
    parse_endpoint_list("10.0.0.1:6170,$(id):6170", kPserverEndpoints);
    FAIL() << "$(id) is no host";
  } catch (const EnvError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "PADDLE_PSERVERS_IP_PORT_LIST='10.0.0.1:6170,$(id):6170': "
                         "entry '$(id):6170': '$(id)' is not an IPv4 address"))
        << e.what();
  }
}

}  // namespace
}  // namespace ddl::env
