// The toolchain: runs the system C++ compiler on generated sources and loads the results.
// Disk entries are named by a hash of everything that decides the machine code (source, the
// functors header it includes, compiler version, flags) and are published by rename, so two
// processes building one source both end up loading a complete library. The includes every
// source opens with are precompiled once per cache directory, compiler, flags and functors
// header, in the background, and passed to the builds that find the result ready.
//
// The cache holds code this process runs, so nothing in it is trusted blindly. A library ends
// in a trailer with its size and hash, checked before dlopen (a truncated one would load and
// die of SIGBUS; a damaged one is built again). As ssh treats its keys, a cache directory
// writable by others or owned by another user is not used at all (one warning; builds go to a
// private directory for the rest of the process), and a file in it that is not ours or is
// writable by others is not loaded (one warning; it is built again over it).
#include "compiler/toolchain.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "capture/capture.h"
#include "compiler/kernel_headers.h"
#include "compiler/once_cache.h"
#include "core/logs.h"
#include "ember/error.h"

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

// ---- trust: whose files the cache holds, and whether they are whole ----

// EMBER_LOGS=compiler: what the cache found wrong and did about it.
void log_cache(const std::string& text) {
  static const bool on = log_category_enabled("compiler");
  if (on) std::fprintf(stderr, "[ember:compiler] %s\n", text.c_str());
}

// Prints each distinct warning once per process.
void warn_once(const std::string& key, const std::string& text) {
  static std::mutex mu;
  static std::unordered_set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(key).second) return;
  }
  capture::warn(text);
}

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// Why a file or directory others could have written is not to be trusted, or "" when it is
// ours (or root's, as ssh accepts) and writable by nobody else. `sticky_ok`: a directory
// writable by others but with the sticky bit (/tmp) lets no one replace what is ours in it.
std::string untrusted(const struct stat& st, bool sticky_ok) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return "it is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(me) + ") or root";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(sticky_ok && (st.st_mode & S_ISVTX)))
    return std::string("it is writable by ") + (st.st_mode & S_IWOTH ? "every user" : "its group") +
           " (mode " + octal_mode(st.st_mode) + ")";
  return "";
}

// Why the cache directory `dir` is not to be trusted, or "": the directory itself, then each
// directory above it (any of them writable by others could have it replaced).
std::string untrusted_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return "it cannot be read (errno " + std::to_string(errno) + ")";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  std::string why = untrusted(st, false);
  if (!why.empty()) return why;
  std::error_code ec;
  std::filesystem::path p = std::filesystem::canonical(dir, ec);
  if (ec) return "its path cannot be resolved (" + ec.message() + ")";
  for (p = p.parent_path(); !p.empty(); p = p.parent_path()) {
    if (::stat(p.c_str(), &st) != 0) break;
    why = untrusted(st, true);
    if (!why.empty())
      return "the directory above it, " + p.string() + ", cannot be trusted: " + why;
    if (p == p.root_path()) break;
  }
  return "";
}

// The private directory builds go to while the configured one is refused: made (mode 0700,
// by mkdtemp) on first use, kept for the rest of the process, removed at exit.
std::string g_private_dir;
void remove_private_dir() {
  std::error_code ec;
  std::filesystem::remove_all(g_private_dir, ec);
}
const std::string& private_dir() {
  static const std::string d = [] {
    const std::string base = env_or("TMPDIR", "/tmp");
    std::string tmpl = base + "/ember-kernels-XXXXXX";
    EMBER_CHECK(::mkdtemp(tmpl.data()), "compiler: cannot create a private directory under ", base,
                " (errno ", errno, "); set EMBER_CACHE_DIR to a directory of your own ",
                "(mode 0700)");
    g_private_dir = tmpl;
    std::atexit(remove_private_dir);
    return tmpl;
  }();
  return d;
}

// The directory builds use: the configured cache directory when it can be trusted, else a
// private one (checked on each call: a cache directory can change hands while we run).
std::string usable_cache_dir() {
  const std::string dir = cache_dir();
  make_dirs(dir);
  const std::string why = untrusted_dir(dir);
  if (why.empty()) return dir;
  const std::string& own = private_dir();
  warn_once("dir " + dir + ": " + why,
            "compiler: not using the kernel cache directory " + dir + ": " + why +
                ". A library or header planted there would run in this process, so kernels are "
                "built in " + own + ", a private directory of this process, instead. Make the "
                "directory yours and private (chown, chmod 700) or set EMBER_CACHE_DIR to one "
                "that is");
  return own;
}

// A library as published: the bytes the compiler wrote, then this trailer.
struct Trailer {
  char magic[8];
  uint64_t size;  // bytes before the trailer
  uint64_t hash;  // FNV-1a of them
};
constexpr char kTrailerMagic[8] = {'E', 'M', 'B', 'E', 'R', 'L', 'I', 'B'};

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}

// Appends the trailer to the library the compiler just wrote, and takes away any write
// permission of others (the umask may have granted some).
void seal_library(const std::string& lib) {
  std::string bytes = read_file(lib);
  EMBER_CHECK(!bytes.empty(), "compiler: cannot read the library just built, ", lib);
  Trailer t;
  std::memcpy(t.magic, kTrailerMagic, sizeof t.magic);
  t.size = bytes.size();
  t.hash = fnv1a(bytes.data(), bytes.size());
  std::ofstream f(lib, std::ios::binary | std::ios::app);
  f.write(reinterpret_cast<const char*>(&t), sizeof t);
  f.close();
  EMBER_CHECK(f.good(), "compiler: cannot write ", lib, " (errno ", errno, ")");
  struct stat st {};
  if (::stat(lib.c_str(), &st) == 0) ::chmod(lib.c_str(), st.st_mode & 0755);
}

// What is wrong with the disk entry at `path`, or "" when it may be loaded: it must be a
// regular file of ours that nobody else can write, and end in a trailer that matches it.
// `untrusted_file` is set when the problem is whose it is rather than what it holds.
std::string check_entry(const std::string& path, bool* untrusted_file,
                        std::string* payload = nullptr) {
  *untrusted_file = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *untrusted_file = errno == ELOOP;
    return errno == ELOOP ? "it is a symbolic link"
                          : "it cannot be opened (errno " + std::to_string(errno) + ")";
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = "it cannot be read";
  } else if (!S_ISREG(st.st_mode)) {
    why = "it is not a regular file";
    *untrusted_file = true;
  } else if (why = untrusted(st, false); !why.empty()) {
    *untrusted_file = true;
  }
  std::string bytes;
  if (why.empty()) {
    bytes.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n <= 0) break;
      got += size_t(n);
    }
    if (got != bytes.size()) why = "it cannot be read";
  }
  ::close(fd);
  if (!why.empty()) return why;
  Trailer t{};
  if (bytes.size() < sizeof t)
    return "it is truncated (" + std::to_string(bytes.size()) + " bytes)";
  std::memcpy(&t, bytes.data() + bytes.size() - sizeof t, sizeof t);
  if (std::memcmp(t.magic, kTrailerMagic, sizeof t.magic) != 0)
    return "it has no trailer (truncated, or written by an older ember)";
  if (t.size != bytes.size() - sizeof t)
    return "its size is " + std::to_string(bytes.size() - sizeof t) + " bytes, " +
           std::to_string(t.size) + " were published";
  if (fnv1a(bytes.data(), size_t(t.size)) != t.hash)
    return "its contents changed since it was built";
  if (payload) *payload = bytes.substr(0, size_t(t.size));
  return "";
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

// Why the precompiled includes in `dir` are not to be used, or "": the directory and both
// files ours and written by nobody else, and the header the one ember writes (the compiler
// reads the header whenever the .gch does not suit it).
std::string check_prelude(const std::string& dir, const std::string& header,
                          const std::string& gch) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (std::string why = untrusted(st, false); !why.empty()) return dir + ": " + why;
  if (::lstat(gch.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return gch + " is not a regular file";
  if (std::string why = untrusted(st, false); !why.empty()) return gch + ": " + why;
  int fd = ::open(header.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return header + " cannot be opened (errno " + std::to_string(errno) + ")";
  std::string why;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why = header + " is not a regular file";
  if (why.empty()) {
    why = untrusted(st, false);
    if (!why.empty()) why = header + ": " + why;
  }
  ::close(fd);
  if (why.empty() && read_file(header) != generated_includes())
    why = header + " is not the header ember writes there";
  return why;
}

// The precompiled includes: <cache>/pch-<key>/ember_prelude.h and its .gch, the key a hash of
// what decides the precompiled result. Returns the header's path when its .gch is ready;
// otherwise starts building it (once per process and directory) and returns "". The build
// runs as a background shell job that publishes the .gch by rename, so it finishes even when
// this process exits first, and a half-written file is never seen. Ready files that cannot be
// trusted (check_prelude) are not used: removed and built again, or, in a directory that is
// not ours, left alone.
std::string precompiled_includes(const std::string& cache) {
  if (env_or("EMBER_PCH", "1") == "0") return "";
  const std::string dir = cache + "/pch-" +
                          hash_hex(generated_includes() + '\0' + functors_header() + '\0' +
                                   compiler_version() + '\0' + compiler_flags());
  const std::string header = dir + "/ember_prelude.h", gch = header + ".gch";
  if (::access(gch.c_str(), F_OK) == 0) {
    const std::string why = check_prelude(dir, header, gch);
    if (why.empty()) return header;
    const std::string text = "compiler: not using the precompiled includes in " + dir + ": " + why;
    warn_once("pch " + dir + ": " + why, text + "; building without them");
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !untrusted(st, false).empty()) return "";
    std::remove(gch.c_str());
    std::remove(header.c_str());
  }
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
  ::chmod(tmp_header.c_str(), 0644);
  if (std::rename(tmp_header.c_str(), header.c_str()) != 0) return "";
  const std::string tmp = gch + ".tmp." + unique_suffix();
  // At the lowest priority: it must not slow down the builds that run meanwhile. Published
  // writable by us alone, whatever the umask: check_prelude refuses anything else.
  const std::string cmd =
      "( nice -n 19 " + compiler_command() + " " + compiler_flags() + " -x c++-header -I" +
      shell_quote(kernel_include_dir()) + " -o " + shell_quote(tmp) + " " +
      shell_quote(header) + " > /dev/null 2>&1 && chmod go-w " + shell_quote(tmp) +
      " && mv -f " + shell_quote(tmp) + " " + shell_quote(gch) + " || rm -f " + shell_quote(tmp) +
      " ) > /dev/null 2>&1 &";
  // Returns at once; the job goes on by itself, and a failed job leaves no header behind.
  [[maybe_unused]] const int shell = std::system(cmd.c_str());
  return "";
}

// Builds source into `final_path`: compile to a private temporary, seal it (seal_library),
// then rename over. With the precompiled includes of `cache` first (when `use_pch`);
// should that build fail, once more without them (a .gch another compiler cannot read, say),
// and the .gch is dropped so that it is built again.
void build(const std::string& source, const std::string& cache, const std::string& final_path,
           bool use_pch) {
  const std::string tmp = final_path + ".tmp." + unique_suffix();
  const std::string src = tmp + ".cpp", lib = tmp + ".so", log = tmp + ".log";
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    EMBER_CHECK(f.good(), "compiler: cannot write ", src);
  }
  const std::string pch = use_pch ? precompiled_includes(cache) : "";
  auto command = [&](const std::string& extra) {
    return compiler_command() + " " + compiler_flags() + extra + " -I" +
           shell_quote(kernel_include_dir()) + " -o " + shell_quote(lib) + " " +
           shell_quote(src) + " > " + shell_quote(log) + " 2>&1";
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
  try {
    seal_library(lib);
  } catch (...) {
    std::remove(src.c_str());
    std::remove(lib.c_str());
    throw;
  }
  // The source is kept next to the library for reading (EMBER_LOGS=output_code prints it too).
  std::rename(src.c_str(), (final_path.substr(0, final_path.size() - 3) + ".cpp").c_str());
  EMBER_CHECK(std::rename(lib.c_str(), final_path.c_str()) == 0, "compiler: cannot move ", lib,
              " to ", final_path, " (errno ", errno, ")");
}

// Libraries by path, loaded or built once per process.
OnceCache<std::shared_ptr<const Library>>& memory_cache() {
  static OnceCache<std::shared_ptr<const Library>> c;
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

// A disk entry that can be loaded as it is, or null (and why in `why`). `untrusted_file`:
// the entry is not ours or others can write it, rather than damaged.
void* open_entry(const std::string& path, const std::string& entry, std::string* why,
                 bool* untrusted_file) {
  *why = check_entry(path, untrusted_file);
  if (!why->empty()) return nullptr;
  void* h = try_open(path, entry);
  if (!h) {
    const char* e = ::dlerror();
    *why = e ? std::string(e) : "it lacks the entry point " + entry;
  }
  return h;
}

std::shared_ptr<const Library> load_source(const std::string& source, const std::string& entry) {
  // The functors header is part of what the library computes: a change to it is a new entry.
  const std::string key = hash_hex(source + '\0' + functors_header() + '\0' + compiler_version() +
                                   '\0' + compiler_flags());
  const std::string dir = usable_cache_dir();
  // A private directory lives as long as the process: a precompiled header there would pay
  // for itself too rarely, and its background build could outlive the directory.
  const bool use_pch = dir == cache_dir();
  const std::string path = dir + "/" + key + ".so";

  bool hit = false;
  auto lib = memory_cache().get(path, [&] {
    void* h = nullptr;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      std::string why;
      bool untrusted_file = false;
      h = open_entry(path, entry, &why, &untrusted_file);
      if (h) {
        ++g_disk_hits;
      } else {
        ++g_rebuilds;  // truncated, damaged, foreign or stale: build it again over the bad one
        const std::string text = "compiler: not loading the cached library " + path + ": " + why;
        if (untrusted_file) warn_once("file " + path + ": " + why, text + "; building it again");
        log_cache("rebuilding the cached library " + path + ": " + why);
      }
    }
    if (!h) {
      build(source, dir, path, use_pch);
      h = try_open(path, entry);
      if (!h) {
        const char* why = ::dlerror();
        EMBER_FAIL("compiler: cannot load the library just built, ", path, ": ",
                   why ? std::string(why) : "missing entry point " + entry);
      }
    }
    return std::make_shared<const Library>(h, path);
  }, &hit);
  if (hit) ++g_memory_hits;
  return lib;
}

namespace cache_entry {

std::string key(const std::string& text) { return hash_hex(text); }

std::string directory() { return usable_cache_dir(); }

std::optional<std::string> read(const std::string& path, std::string* why) {
  why->clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  bool untrusted_file = false;
  std::string payload;
  *why = check_entry(path, &untrusted_file, &payload);
  if (why->empty()) return payload;
  const std::string text = "compiler: not loading the cached entry " + path + ": " + *why;
  if (untrusted_file) warn_once("file " + path + ": " + *why, text + "; building it again");
  log_cache("rebuilding the cached entry " + path + ": " + *why);
  return std::nullopt;
}

void write(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + unique_suffix();
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    if (!f.good()) {
      std::remove(tmp.c_str());
      EMBER_FAIL("compiler: cannot write ", tmp, " (errno ", errno, ")");
    }
  }
  try {
    seal_library(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  EMBER_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "compiler: cannot move ", tmp, " to ",
              path, " (errno ", errno, ")");
}

}  // namespace cache_entry

ToolchainStats toolchain_stats() {
  return {g_compiler_runs.load(), g_disk_hits.load(), g_memory_hits.load(), g_rebuilds.load(),
          g_precompiled.load()};
}

void clear_memory_cache() {
  memory_cache().clear();
}

}  // namespace ember::compiler
