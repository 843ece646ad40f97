// Uses each non-Torch library of the GPU bundle once (Gloo's TCP device on 127.0.0.1, Asio,
// cxxopts, nlohmann/json, spdlog/fmt, zlib) and prints one JSON line; exit 0 when all worked.
#include <zlib.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cxxopts.hpp>
#include <exception>
#include <gloo/transport/tcp/device.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <string>

int main(int argc, char** argv) {
  try {
    cxxopts::Options spec("gpu_bundle_probe", "links every library of the GPU bundle once");
    spec.add_options()("name", "what to greet", cxxopts::value<std::string>()->default_value("bundle"));
    const auto args = spec.parse(argc, argv);

    boost::asio::io_context io;
    int posted = 0;
    boost::asio::post(io, [&] { ++posted; });
    io.run();

    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    const auto device = gloo::transport::tcp::CreateDevice(attr);

    spdlog::info("probe {}: gloo device {}", args["name"].as<std::string>(), device->str());
    const nlohmann::json out = {{"asio_posted", posted},
                                {"gloo_device", device->str()},
                                {"zlib", zlibVersion()},
                                {"ok", posted == 1 && device != nullptr}};
    std::cout << out.dump() << std::endl;
    return out["ok"].get<bool>() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gpu_bundle_probe: error: " << e.what() << std::endl;
    return 1;
  }
}
