// flag_reference: prints the flag reference of docs/flags.md from the flag table, or with
// --write PAGE replaces the block between the page's markers (docs/developing.md).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "launcher/options/flags.h"

int main(int argc, char** argv) {
  using namespace ddl::launcher;
  const std::string usage = "usage: flag_reference [--write docs/flags.md]";
  if (argc == 1) {
    std::cout << flag_reference_markdown();
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "--write") {
    std::cerr << usage << "\n";
    return 2;
  }
  const std::string path = argv[2];
  std::ifstream in(path);
  if (!in) {
    std::cerr << "flag_reference: cannot read " << path << "\n";
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const std::string updated = with_flag_reference(text.str());
    std::ofstream out(path, std::ios::trunc);
    out << updated;
    if (!out.flush()) {
      std::cerr << "flag_reference: cannot write " << path << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "flag_reference: " << path << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
