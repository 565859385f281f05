// The toolchain: runs the system C++ compiler on generated sources and loads the results.
// Disk entries are named by a hash of everything that decides the machine code (source, the
// functors header it includes, compiler version, flags) and are published by rename, so two
// processes building one source both end up loading a complete library. The includes every
// source opens with are precompiled once per cache directory, compiler, flags and functors
// header, in the background, and passed to the builds that find the result ready.
#include "compiler/toolchain.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "ember/error.h"

#ifndef EMBER_SRC_DIR
#error "EMBER_SRC_DIR (the absolute path of ember's src/) must be defined by the build"
#endif

namespace ember::compiler {

namespace {

std::atomic<int64_t> g_compiler_runs{0}, g_disk_hits{0}, g_memory_hits{0}, g_rebuilds{0},
    g_precompiled{0};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string compiler_command() { return env_or("CXX", "c++"); }

// Runs a shell command and returns its stdout; `ok` is false on a nonzero exit.
std::string run_capture(const std::string& cmd, bool* ok) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *ok = false;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  *ok = status == 0;
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Two independent 64-bit FNV-1a hashes: 128 bits name a cache entry.
std::string hash_hex(const std::string& s) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : s) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ (c + 0x5bu)) * 0x100000001b3ull;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

// mkdir -p; directories this creates get mode 0700 (the cache holds code we execute).
void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      EMBER_FAIL("compiler: cannot create the cache directory ", part, " (errno ", errno,
                 "); set EMBER_CACHE_DIR to a writable directory");
  }
}

void* try_open(const std::string& path, const std::string& entry) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  if (!::dlsym(h, entry.c_str())) {
    ::dlclose(h);
    return nullptr;
  }
  return h;
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream ss;
  ss << ::getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id()) << "."
     << counter++;
  return ss.str();
}

// s as one shell word: in single quotes, each quote inside written as '\''.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

const std::string& functors_header() {
  static const std::string h = read_file(EMBER_SRC_DIR "/kernels/functors.h");
  return h;
}

// The precompiled includes: <cache>/pch-<key>/ember_prelude.h and its .gch, the key a hash of
// what decides the precompiled result. Returns the header's path when its .gch is ready;
// otherwise starts building it (once per process and directory) and returns "". The build
// runs as a background shell job that publishes the .gch by rename, so it finishes even when
// this process exits first, and a half-written file is never seen.
std::string precompiled_includes() {
  if (env_or("EMBER_PCH", "1") == "0") return "";
  const std::string dir =
      cache_dir() + "/pch-" +
      hash_hex(generated_includes() + '\0' + functors_header() + '\0' + compiler_version() +
               '\0' + compiler_flags());
  const std::string header = dir + "/ember_prelude.h", gch = header + ".gch";
  if (::access(gch.c_str(), R_OK) == 0) return header;
  static std::mutex mu;
  static std::unordered_set<std::string> started;
  std::lock_guard<std::mutex> lock(mu);
  if (!started.insert(dir).second) return "";
  make_dirs(dir);
  const std::string tmp_header = header + ".tmp." + unique_suffix();
  {
    std::ofstream f(tmp_header, std::ios::binary);
    f << generated_includes();
    if (!f.good()) return "";
  }
  if (std::rename(tmp_header.c_str(), header.c_str()) != 0) return "";
  const std::string tmp = gch + ".tmp." + unique_suffix();
  // At the lowest priority: it must not slow down the builds that run meanwhile.
  const std::string cmd =
      "( nice -n 19 " + compiler_command() + " " + compiler_flags() + " -x c++-header -I" +
      shell_quote(EMBER_SRC_DIR) + " -o " + shell_quote(tmp) + " " + shell_quote(header) +
      " > /dev/null 2>&1 && mv -f " + shell_quote(tmp) + " " + shell_quote(gch) + " || rm -f " +
      shell_quote(tmp) + " ) > /dev/null 2>&1 &";
  std::system(cmd.c_str());  // returns at once; the job goes on by itself
  return "";
}

// Builds source into `final_path`: compile to a private temporary, then rename over. With
// the precompiled includes first; should that build fail, once more without them (a .gch
// another compiler cannot read, say), and the .gch is dropped so that it is built again.
void build(const std::string& source, const std::string& final_path) {
  const std::string tmp = final_path + ".tmp." + unique_suffix();
  const std::string src = tmp + ".cpp", lib = tmp + ".so", log = tmp + ".log";
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    EMBER_CHECK(f.good(), "compiler: cannot write ", src);
  }
  const std::string pch = precompiled_includes();
  auto command = [&](const std::string& extra) {
    return compiler_command() + " " + compiler_flags() + extra + " -I" +
           shell_quote(EMBER_SRC_DIR) + " -o " + shell_quote(lib) + " " + shell_quote(src) + " > " +
           shell_quote(log) + " 2>&1";
  };
  std::string cmd = command(pch.empty() ? "" : " -include " + shell_quote(pch));
  ++g_compiler_runs;
  int status = std::system(cmd.c_str());
  if (status == 0 && !pch.empty()) ++g_precompiled;
  if (status != 0 && !pch.empty()) {
    cmd = command("");
    status = std::system(cmd.c_str());
    if (status == 0) std::remove((pch + ".gch").c_str());
  }
  if (status != 0) {
    std::string msgs = read_file(log);
    std::remove(src.c_str());
    std::remove(lib.c_str());
    std::remove(log.c_str());
    EMBER_FAIL("compiler: building generated code failed (", cmd, "):\n", msgs);
  }
  std::remove(log.c_str());
  // The source is kept next to the library for reading (EMBER_LOGS=output_code prints it too).
  std::rename(src.c_str(), (final_path.substr(0, final_path.size() - 3) + ".cpp").c_str());
  EMBER_CHECK(std::rename(lib.c_str(), final_path.c_str()) == 0, "compiler: cannot move ", lib,
              " to ", final_path, " (errno ", errno, ")");
}

// Libraries by path. An entry exists from the moment a thread starts loading or building it:
// other threads asking for the same library wait on its future, while different libraries
// build side by side (a training graph's forward and backward).
struct MemoryCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const Library>>> libs;
};
MemoryCache& memory_cache() {
  static MemoryCache c;
  return c;
}

}  // namespace

Library::~Library() {
  if (handle_) ::dlclose(handle_);
}

void* Library::symbol(const std::string& name) const {
  void* p = ::dlsym(handle_, name.c_str());
  EMBER_CHECK(p, "compiler: symbol ", name, " not found in ", path_);
  return p;
}

bool compiler_available() {
  static const bool ok = [] {
    bool good = false;
    run_capture(compiler_command() + " --version 2>/dev/null", &good);
    return good;
  }();
  return ok;
}

const std::string& compiler_version() {
  static const std::string v = [] {
    bool good = false;
    std::string out = run_capture(compiler_command() + " --version 2>/dev/null", &good);
    return compiler_command() + ": " + out.substr(0, out.find('\n'));
  }();
  return v;
}

const std::string& compiler_flags() {
  static const std::string f =
      env_or("EMBER_CXXFLAGS", "-O3 -march=native -fopenmp -shared -fPIC -std=c++20 -fno-math-errno");
  return f;
}

const std::string& generated_includes() {
  static const std::string s =
      "#include <cstdint>\n#include <cstring>\n#include <limits>\n#include <new>\n"
      "#include <omp.h>\n#if defined(__AVX__)\n#include <immintrin.h>\n#endif\n\n"
      "#include \"kernels/functors.h\"\n";
  return s;
}

std::string cache_dir() {
  const char* d = std::getenv("EMBER_CACHE_DIR");
  if (d && *d) return d;
  return env_or("HOME", "/tmp") + "/.cache/ember";
}

std::shared_ptr<const Library> load_source(const std::string& source, const std::string& entry) {
  // The functors header is part of what the library computes: a change to it is a new entry.
  const std::string key = hash_hex(source + '\0' + functors_header() + '\0' + compiler_version() +
                                   '\0' + compiler_flags());
  const std::string dir = cache_dir();
  const std::string path = dir + "/" + key + ".so";

  MemoryCache& mc = memory_cache();
  std::promise<std::shared_ptr<const Library>> promise;
  {
    std::lock_guard<std::mutex> lock(mc.mu);
    auto it = mc.libs.find(path);
    if (it != mc.libs.end()) {
      ++g_memory_hits;
      std::shared_future<std::shared_ptr<const Library>> f = it->second;
      return f.get();  // built (or being built) by another call; rethrows its failure
    }
    mc.libs.emplace(path, promise.get_future().share());
  }
  try {
    make_dirs(dir);
    void* h = nullptr;
    if (::access(path.c_str(), F_OK) == 0) {
      h = try_open(path, entry);
      if (h) {
        ++g_disk_hits;
      } else {
        ++g_rebuilds;  // truncated, foreign or stale: build it again over the bad one
      }
    }
    if (!h) {
      build(source, path);
      h = try_open(path, entry);
      if (!h) {
        const char* why = ::dlerror();
        EMBER_FAIL("compiler: cannot load the library just built, ", path, ": ",
                   why ? std::string(why) : "missing entry point " + entry);
      }
    }
    auto lib = std::make_shared<const Library>(h, path);
    promise.set_value(lib);
    return lib;
  } catch (...) {
    // Waiters get the error; the next call tries again.
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mc.mu);
    mc.libs.erase(path);
    throw;
  }
}

ToolchainStats toolchain_stats() {
  return {g_compiler_runs.load(), g_disk_hits.load(), g_memory_hits.load(), g_rebuilds.load(),
          g_precompiled.load()};
}

void clear_memory_cache() {
  MemoryCache& mc = memory_cache();
  std::lock_guard<std::mutex> lock(mc.mu);
  mc.libs.clear();
}

}  // namespace ember::compiler
