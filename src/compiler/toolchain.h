// Building generated C++ into shared libraries with the system compiler, and loading them:
// a disk cache keyed by source, compiler and flags, plus an in-process cache.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ember::compiler {

// A loaded shared library; stays loaded while anyone holds it.
class Library {
 public:
  Library(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  // The address of an extern "C" symbol; throws Error naming the library when it is missing.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_;
  std::string path_;
};

// Counters over the process (tests assert them).
struct ToolchainStats {
  int64_t compiler_runs = 0;  // invocations of the C++ compiler
  int64_t disk_hits = 0;      // libraries loaded from the disk cache
  int64_t memory_hits = 0;    // sources found already loaded in this process
  int64_t rebuilds = 0;       // disk entries that would not load and were built again
  int64_t precompiled = 0;    // compiler runs that read the precompiled includes
};

// Whether a C++ compiler ($CXX, else c++) answers `--version`; checked once.
bool compiler_available();
// "g++ (Debian 12.2.0-14) 12.2.0": the first line of `--version`, part of the cache key.
const std::string& compiler_version();
// $EMBER_CXXFLAGS, else the default flags (-O3 -march=native -fopenmp ...).
const std::string& compiler_flags();
// $EMBER_CACHE_DIR, else ~/.cache/ember; created (mode 0700) by the first build. Not used
// when others could write into it (it, or a directory above it without the sticky bit, is
// writable by group or others, or owned by another user than this one or root): builds then
// go to a private directory made for the process, with one warning.
std::string cache_dir();
// The #include lines that open every generated source. Builds pass them precompiled (a header
// kept in the cache directory per compiler, flags and functors header, built in the background
// by the first build that finds it missing), which spares each build most of its parsing;
// EMBER_PCH=0 turns that off.
const std::string& generated_includes();

// Compiles `source` into a shared library (or finds it in the caches) and loads it. Throws
// Error with the compiler's messages when compilation fails. `entry` is a symbol the library
// must export. A disk entry is loaded only when its size and hash match those recorded when it
// was built and it is ours, writable by no one else; otherwise (or when it lacks `entry`) it
// counts as a rebuild and is built again in its place.
std::shared_ptr<const Library> load_source(const std::string& source, const std::string& entry);

// The disk cache's rules for entries other than these libraries (toolchain_cuda.h's binaries):
// named by a key, published whole by rename, ending in a trailer with their size and hash,
// loaded only when ours and writable by no one else.
namespace cache_entry {
// 32 hex digits naming `text` (everything that decides the entry's contents).
std::string key(const std::string& text);
// The directory entries go to: cache_dir() when it can be trusted, else a private one.
std::string directory();
// The entry's contents; nullopt when it is absent (`why` empty) or must be built again (`why`
// says what is wrong with it).
std::optional<std::string> read(const std::string& path, std::string* why);
// Publishes `bytes` at `path`, atomically, with the trailer.
void write(const std::string& path, const std::string& bytes);
}  // namespace cache_entry

ToolchainStats toolchain_stats();
// Forgets the libraries loaded in this process (the disk cache stays): tests use it to
// check disk hits.
void clear_memory_cache();

}  // namespace ember::compiler
