#include "worker/runtime/compute_libraries.h"

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace ddl {
namespace {

// A function of `library` (a dlopen handle: that library and what it needs; RTLD_DEFAULT: the
// process's global scope), or nullptr.
template <typename F>
F* symbol(const char* name, void* library = RTLD_DEFAULT) {
  return reinterpret_cast<F*>(dlsym(library, name));
}

std::string text_of(const char* s) { return s != nullptr ? std::string(s) : std::string(); }

// oneDNN 2.x's dnnl_version_t, as its header lays it out.
struct OneDnnVersion {
  int major;
  int minor;
  int patch;
  const char* hash;
  unsigned cpu_runtime;
  unsigned gpu_runtime;
};

// oneDNN 2.x's dnnl_cpu_isa_t values (bit sets: each extends the one before).
std::string onednn_isa_name(int isa) {
  switch (isa) {
    case 0x0:
      return "any";
    case 0x1:
      return "sse41";
    case 0x3:
      return "avx";
    case 0x7:
      return "avx2";
    case 0x407:
      return "avx2_vnni";
    case 0x27:
      return "avx512_core";
    case 0x67:
      return "avx512_core_vnni";
    case 0xe7:
      return "avx512_core_bf16";
    case 0x3e7:
      return "avx512_core_amx";
    default:
      break;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "isa 0x%x", static_cast<unsigned>(isa));
  return hex;
}

std::string cpu_vector_extension() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    if (flags.count("avx512f")) return "AVX-512";
    if (flags.count("avx2") && flags.count("fma")) return "AVX2";
    if (flags.count("avx")) return "AVX";
    return "SSE";
  }
  return "unknown";
}

// The library sgemm_ comes from, held open (without loading anything) while in scope. Its
// handle finds what that library needs too (OpenBLAS's libblas.so.3 needs libopenblas.so.0), but
// not another BLAS loaded beside it (OpenBLAS's liblapack.so.3 next to the reference
// libblas.so.3), which is not the one that multiplies.
class BlasLibrary {
 public:
  BlasLibrary() {
    void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
    Dl_info info{};
    if (sgemm == nullptr || dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr) return;
    file_ = info.dli_fname;
    handle_ = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }
  ~BlasLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  BlasLibrary(const BlasLibrary&) = delete;
  BlasLibrary& operator=(const BlasLibrary&) = delete;

  const std::string& file() const { return file_; }  // as loaded; empty: no sgemm_
  void* handle() const { return handle_; }           // nullptr: not found

 private:
  std::string file_;
  void* handle_ = nullptr;
};

void find_blas(ComputeLibraries& libs) {
  const BlasLibrary blas;
  if (blas.file().empty()) return;
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(blas.file(), ec);
  libs.blas_file = ec ? blas.file() : real.string();
  void* library = blas.handle();
  if (library == nullptr) return;
  if (auto* config = symbol<char*()>("openblas_get_config", library)) {
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": its first two words.
    std::istringstream words(text_of(config()));
    std::string name, version;
    words >> name >> version;
    libs.blas = name.empty() ? "OpenBLAS" : name + (version.empty() ? "" : " " + version);
    if (auto* core = symbol<char*()>("openblas_get_corename", library))
      libs.blas_kernels = text_of(core());
    if (auto* threads = symbol<int()>("openblas_get_num_threads", library))
      libs.blas_threads = threads();
    return;
  }
  if (auto* threads = symbol<int()>("mkl_get_max_threads", library)) {
    libs.blas = "MKL";
    libs.blas_threads = threads();
    return;
  }
  // Debian's BLIS exports only the BLAS and CBLAS names from its libblas.so.3 (its bli_ functions
  // stay hidden): it is known by its folder (blis-pthread, blis-openmp, blis-serial).
  const std::string folder = real.parent_path().filename().string();
  if (folder.rfind("blis", 0) == 0) {
    libs.blas = "BLIS (" + folder + ")";
    return;
  }
  // Debian's netlib libblas.so.3 lives in .../blas/; anything else is named by its file.
  if (folder != "blas") {
    libs.blas = "an unrecognised BLAS";
    return;
  }
  libs.blas = "the reference BLAS (netlib)";
  libs.reference_blas = true;
}

}  // namespace

bool set_blas_threads(int threads) {
  const BlasLibrary blas;
  if (blas.handle() == nullptr) return false;
  if (auto* openblas = symbol<void(int)>("openblas_set_num_threads", blas.handle())) {
    openblas(threads);
    return true;
  }
  if (auto* mkl = symbol<void(int)>("mkl_set_num_threads", blas.handle())) {
    mkl(threads);
    return true;
  }
  return false;
}

ComputeLibraries detect_compute_libraries() {
  ComputeLibraries libs;
  find_blas(libs);
  if (auto* version = symbol<const OneDnnVersion*()>("dnnl_version")) {
    const OneDnnVersion* v = version();
    libs.onednn = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch);
    if (auto* isa = symbol<int()>("dnnl_get_effective_cpu_isa")) {
      libs.onednn += " (" + onednn_isa_name(isa()) + ")";
    }
  }
  libs.cpu_vector = cpu_vector_extension();
  return libs;
}

std::string describe(const ComputeLibraries& libs) {
  std::string line = "BLAS: " + (libs.blas.empty() ? std::string("none loaded") : libs.blas);
  if (!libs.blas_kernels.empty()) line += ", " + libs.blas_kernels + " kernels";
  if (libs.blas_threads) line += ", " + std::to_string(*libs.blas_threads) + " thread(s)";
  if (!libs.blas_file.empty()) line += " (" + libs.blas_file + ")";
  if (!libs.onednn.empty()) line += "; " + libs.onednn;
  line += "; CPU: " + libs.cpu_vector;
  return line;
}

std::string reference_blas_warning(const ComputeLibraries& libs) {
  if (!libs.reference_blas) return {};
  return "the matrix products run on the reference BLAS (" + libs.blas_file +
         "), tens of times slower than an optimised one: install Debian's libopenblas0-pthread "
         "(scripts/setup.sh does), which takes over libblas.so.3";
}

}  // namespace ddl
