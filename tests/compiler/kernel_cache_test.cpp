// The kernel cache is not trusted blindly. A library is loaded from disk only when it is whole
// (its size and hash as published) and ours alone; a cache directory that others can write
// into, or that another user owns, is not used at all (one warning, builds go to a private
// directory). Libraries here are tiny sources through compiler::load_source; "planted" ones
// leave a marker file when loaded, which is how a test sees foreign code run.
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using test::CacheDir;
using test::ScopedEnv;

const char* kEntry = "ember_cache_test_value";
const char* kMarkerEnv = "EMBER_CACHE_TEST_MARKER";

// A constructor that creates the file $EMBER_CACHE_TEST_MARKER names, run when the library
// holding it is loaded: the sign that code someone planted ran.
const char* kPlantedCode =
    "#include <cstdio>\n#include <cstdlib>\n"
    "__attribute__((constructor)) static void ember_planted() {\n"
    "  if (const char* m = std::getenv(\"EMBER_CACHE_TEST_MARKER\"))\n"
    "    if (std::FILE* f = std::fopen(m, \"w\")) std::fclose(f);\n"
    "}\n";

// A library whose entry returns v; `planted` adds the marker constructor.
std::string value_source(int v, bool planted = false) {
  return std::string(planted ? kPlantedCode : "") +
         "extern \"C\" int ember_cache_test_value() { return " + std::to_string(v) + "; }\n";
}

int value_of(const compiler::Library& lib) {
  return reinterpret_cast<int (*)()>(lib.symbol(kEntry))();
}

void remove_tree(const std::string& d) {
  std::error_code ec;
  fs::remove_all(d, ec);
}

std::string fresh_dir(const std::string& tag) {
  const std::string d = "/tmp/ember-kernel-cache-test-" + tag + "-" + std::to_string(::getpid());
  remove_tree(d);
  return d;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Loads `source` with the cache in `dir`, the in-process cache emptied first.
std::shared_ptr<const compiler::Library> load_in(const std::string& dir,
                                                 const std::string& source) {
  CacheDir guard(dir);
  compiler::clear_memory_cache();
  return compiler::load_source(source, kEntry);
}

// The library of value_source(v) as published in a trusted directory: its file name is the
// one a cache directory would hold for that source.
std::string published_name(int v) {
  const std::string dir = fresh_dir("names");
  const std::string path = load_in(dir, value_source(v))->path();
  compiler::clear_memory_cache();
  remove_tree(dir);
  return fs::path(path).filename().string();
}

// Puts a valid library (its trailer too) whose entry returns `v` and which leaves the marker
// when loaded at `dir`/`name`, the name under which the cache looks for another source.
void plant_library(const std::string& dir, const std::string& name, int v) {
  const std::string scratch = fresh_dir("plant");
  const std::string built = load_in(scratch, value_source(v, true))->path();
  compiler::clear_memory_cache();
  fs::copy_file(built, dir + "/" + name, fs::copy_options::overwrite_existing);
  remove_tree(scratch);
}

// Collects what goes to stderr over a scope, and whether a marker appeared.
struct Watch {
  std::string marker;
  ScopedEnv env;
  explicit Watch(const std::string& tag)
      : marker("/tmp/ember-kernel-cache-marker-" + tag + "-" + std::to_string(::getpid())),
        env(kMarkerEnv, marker) {
    std::remove(marker.c_str());
    ::testing::internal::CaptureStderr();
  }
  std::string stderr_text() { return ::testing::internal::GetCapturedStderr(); }
  bool planted_code_ran() const { return fs::exists(marker); }
  ~Watch() { std::remove(marker.c_str()); }
};

// ---- libraries that are not whole: checked in a child process, where a SIGBUS would be the
// child's death and this test's failure rather than the end of the test binary ----

std::string shell_word(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs KernelCacheChild.DISABLED_<test> of this binary in a fresh process with `env` added;
// returns its exit code (128 + the signal when one ended it) and output.
std::pair<int, std::string> run_child(const std::string& test,
                                      const std::vector<std::pair<std::string, std::string>>& env) {
  char exe[PATH_MAX] = {};
  EXPECT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  std::vector<std::string> words = {"env"};
  for (const auto& [k, v] : env) words.push_back(shell_word(k + "=" + v));
  words.push_back(shell_word(exe));
  words.push_back("--gtest_also_run_disabled_tests");
  words.push_back("--gtest_filter=" + shell_word("KernelCacheChild.DISABLED_" + test));
  words.push_back("2>&1");
  std::string cmd;
  for (const std::string& w : words) cmd.append(cmd.empty() ? "" : " ").append(w);
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  // As a shell reports it: the exit code, or 128 + the signal that ended the process.
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// In a child: value_source(11) loads from $EMBER_CACHE_DIR after one rebuild, and computes.
TEST(KernelCacheChild, DISABLED_LoadsElevenAfterOneRebuild) {
  auto lib = compiler::load_source(value_source(11), kEntry);
  EXPECT_EQ(value_of(*lib), 11);
  EXPECT_EQ(compiler::toolchain_stats().rebuilds, 1);
  EXPECT_EQ(compiler::toolchain_stats().compiler_runs, 1);
  EXPECT_EQ(compiler::toolchain_stats().disk_hits, 0);
}

// Publishes value_source(11) in `dir`, lets `damage` change the file, then loads it in a child
// with EMBER_LOGS=compiler: the child must rebuild it, say so, and compute.
void expect_rebuilt_in_child(const std::string& tag, void (*damage)(const std::string& path)) {
  ScopedEnv no_pch("EMBER_PCH", "0");
  const std::string dir = fresh_dir(tag);
  const std::string path = load_in(dir, value_source(11))->path();
  compiler::clear_memory_cache();  // nothing here holds it loaded now
  damage(path);
  auto [status, out] =
      run_child("LoadsElevenAfterOneRebuild",
                {{"EMBER_CACHE_DIR", dir}, {"EMBER_LOGS", "compiler"}, {"EMBER_PCH", "0"}});
  EXPECT_EQ(status, 0) << "the child failed, or died (SIGBUS is " << 128 + SIGBUS << "):\n" << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_NE(out.find("[ember:compiler] rebuilding the cached library " + path), std::string::npos)
      << out;
  if (status != 0) {  // the library may still be damaged: loading it here could end this binary
    remove_tree(dir);
    return;
  }
  // Whole again: the next load is a disk hit.
  const auto before = compiler::toolchain_stats();
  EXPECT_EQ(value_of(*load_in(dir, value_source(11))), 11);
  const auto after = compiler::toolchain_stats();
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  EXPECT_EQ(after.rebuilds, before.rebuilds);
  compiler::clear_memory_cache();
  remove_tree(dir);
}

TEST(KernelCache, TruncatedLibraryIsRebuiltNotLoaded) {
  // Half a library still has its ELF headers: dlopen maps segments past the end of the file,
  // and the first touch of one is a SIGBUS.
  expect_rebuilt_in_child(
      "truncated", [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); });
}

TEST(KernelCache, LibraryWithChangedBytesIsRebuilt) {
  expect_rebuilt_in_child("flipped", [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(fs::file_size(path) / 2);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(char(c ^ 0x5a));
  });
}

TEST(KernelCache, LibraryWithoutItsTrailerIsRebuilt) {
  // What an older ember published, or a file cut just before its record.
  expect_rebuilt_in_child("notrailer", [](const std::string& path) {
    fs::resize_file(path, fs::file_size(path) - 24);
  });
}

// ---- directories others can write into, or that are not ours ----

// With the cache in `dir` holding a planted library under the name of value_source(v): the
// directory is refused with one warning naming it and `reason`, the planted code does not run,
// and the library comes from a private directory of mode 0700.
void expect_dir_refused(const std::string& dir, int v, const std::string& reason) {
  ScopedEnv no_pch("EMBER_PCH", "0");
  plant_library(dir, published_name(v), 666);
  Watch watch("refused-" + std::to_string(v));
  auto lib = load_in(dir, value_source(v));
  const std::string err = watch.stderr_text();
  EXPECT_EQ(value_of(*lib), v);
  EXPECT_FALSE(watch.planted_code_ran()) << "the library planted in " << dir << " was loaded";
  EXPECT_FALSE(starts_with(lib->path(), dir + "/")) << lib->path();
  EXPECT_NE(err.find("not using the kernel cache directory " + dir + ": "), std::string::npos)
      << err;
  EXPECT_NE(err.find(reason), std::string::npos) << err;
  const std::string own = fs::path(lib->path()).parent_path().string();
  EXPECT_EQ(mode_of(own), 0700u) << own;
  // Once: the next library from the same directory builds privately without a word.
  ::testing::internal::CaptureStderr();
  auto again = load_in(dir, value_source(v + 1));
  const std::string err2 = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(value_of(*again), v + 1);
  EXPECT_EQ(fs::path(again->path()).parent_path().string(), own);
  EXPECT_EQ(err2.find("not using the kernel cache directory"), std::string::npos) << err2;
  compiler::clear_memory_cache();
}

TEST(KernelCache, WorldWritableDirectoryIsNotUsed) {
  const std::string dir = fresh_dir("world");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  expect_dir_refused(dir, 21, "writable by every user (mode 0777)");
  remove_tree(dir);
}

TEST(KernelCache, GroupWritableDirectoryIsNotUsed) {
  const std::string dir = fresh_dir("group");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0770);
  expect_dir_refused(dir, 31, "writable by its group (mode 0770)");
  remove_tree(dir);
}

TEST(KernelCache, DirectoryOfAnotherUserIsNotUsed) {
  // As ssh: the owner must be this user or root. For root, then, "another user" is anyone
  // else: a directory chowned to nobody.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string dir = fresh_dir("nobody");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  expect_dir_refused(dir, 41, "owned by uid 65534, not by this user (uid 0) or root");
  remove_tree(dir);
}

TEST(KernelCache, DirectoryUnderAParentOthersCanWriteIsNotUsed) {
  // Whoever can write the parent can put another directory in the cache's place. The sticky
  // bit (as on /tmp) forbids that, and such a parent is fine.
  const std::string parent = fresh_dir("parent");
  const std::string dir = parent + "/cache";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  ::chmod(parent.c_str(), 0777);
  expect_dir_refused(dir, 51, "the directory above it, " + parent + ", cannot be trusted");
  // With the sticky bit the cache is used, and only for a source not planted there.
  ::chmod(parent.c_str(), 01777);
  ::testing::internal::CaptureStderr();
  auto lib = load_in(dir, value_source(55));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(lib->path(), dir + "/" + published_name(55));
  EXPECT_EQ(err.find("not using"), std::string::npos) << err;
  compiler::clear_memory_cache();
  remove_tree(parent);
}

TEST(KernelCache, PreludePlantedInAWorldWritableDirectoryIsNotCompiledIn) {
  // The precompiled includes live at <cache>/pch-<key>/ember_prelude.h(.gch); the first build
  // in a directory writes the header before it returns, which tells the name. A .gch the
  // compiler cannot read makes it read the header text instead: the planted code.
  const std::string good = fresh_dir("pchname");
  load_in(good, value_source(60));
  compiler::clear_memory_cache();
  std::string pch_name;
  for (const auto& e : fs::directory_iterator(good))
    if (e.is_directory() && starts_with(e.path().filename().string(), "pch-"))
      pch_name = e.path().filename().string();
  ASSERT_FALSE(pch_name.empty()) << "no precompiled includes were started in " << good;
  const std::string dir = fresh_dir("pchworld");
  fs::create_directories(dir + "/" + pch_name);
  ::chmod(dir.c_str(), 0777);
  const std::string header = dir + "/" + pch_name + "/ember_prelude.h";
  std::ofstream(header) << compiler::generated_includes() << kPlantedCode;
  std::ofstream(header + ".gch") << "not a precompiled header";
  Watch watch("pch");
  auto lib = load_in(dir, value_source(61));
  const std::string err = watch.stderr_text();
  EXPECT_EQ(value_of(*lib), 61);
  EXPECT_FALSE(watch.planted_code_ran()) << "the header planted in " << dir << " was compiled in";
  EXPECT_NE(err.find("not using the kernel cache directory " + dir), std::string::npos) << err;
  compiler::clear_memory_cache();
  remove_tree(dir);
  remove_tree(good);  // its background build may still write there: best effort
}

// ---- files in a good directory that are not ours alone ----

// In a private, trusted `dir`: a planted library under the name of value_source(v), given to
// `spoil`, is not loaded but built again in its place, with a warning naming it and `reason`.
void expect_file_refused(const std::string& tag, int v, void (*spoil)(const std::string& path),
                         const std::string& reason) {
  ScopedEnv no_pch("EMBER_PCH", "0");
  const std::string dir = fresh_dir(tag);
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const std::string path = dir + "/" + published_name(v);
  plant_library(dir, fs::path(path).filename().string(), 666);
  spoil(path);
  Watch watch(tag);
  const auto before = compiler::toolchain_stats();
  auto lib = load_in(dir, value_source(v));
  const auto after = compiler::toolchain_stats();
  const std::string err = watch.stderr_text();
  EXPECT_EQ(value_of(*lib), v);
  EXPECT_FALSE(watch.planted_code_ran()) << path << " was loaded";
  EXPECT_EQ(lib->path(), path);  // built again where it was: the directory is ours
  EXPECT_EQ(after.rebuilds, before.rebuilds + 1);
  EXPECT_NE(err.find("not loading the cached library " + path + ": " + reason), std::string::npos)
      << err;
  EXPECT_EQ(mode_of(path) & 022, 0u);
  compiler::clear_memory_cache();
  remove_tree(dir);
}

TEST(KernelCache, LibraryWritableByOthersIsNotLoaded) {
  expect_file_refused(
      "filemode", 71, [](const std::string& p) { ::chmod(p.c_str(), 0666); },
      "it is writable by every user (mode 0666)");
  expect_file_refused(
      "filegroup", 72, [](const std::string& p) { ::chmod(p.c_str(), 0775); },
      "it is writable by its group (mode 0775)");
}

TEST(KernelCache, LibraryOfAnotherUserIsNotLoaded) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  expect_file_refused(
      "fileowner", 73, [](const std::string& p) { ASSERT_EQ(::chown(p.c_str(), 65534, 65534), 0); },
      "it is owned by uid 65534");
}

TEST(KernelCache, LibraryThatIsASymlinkIsNotLoaded) {
  expect_file_refused(
      "filelink", 74,
      [](const std::string& p) {
        fs::rename(p, p + ".elsewhere");
        fs::create_symlink(p + ".elsewhere", p);
      },
      "it is a symbolic link");
}

TEST(KernelCache, PreludeWritableByOthersOrChangedIsNotCompiledIn) {
  // In a good directory the precompiled includes are checked as the libraries are: a header
  // others can write, or one that is not what ember wrote, is not read, and is made again.
  for (int round = 0; round < 2; ++round) {
    const std::string dir = fresh_dir("pchfile" + std::to_string(round));
    load_in(dir, value_source(80 + round));  // starts the precompiled includes there
    compiler::clear_memory_cache();
    std::string header;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && starts_with(e.path().filename().string(), "pch-"))
        header = (e.path() / "ember_prelude.h").string();
    ASSERT_FALSE(header.empty());
    // Planted over whatever the background build has got to.
    std::ofstream(header, std::ios::trunc) << compiler::generated_includes() << kPlantedCode;
    std::ofstream(header + ".gch", std::ios::trunc) << "not a precompiled header";
    ::chmod(header.c_str(), round == 0 ? 0666 : 0600);
    Watch watch("pchfile" + std::to_string(round));
    auto lib = load_in(dir, value_source(90 + round));
    const std::string err = watch.stderr_text();
    EXPECT_EQ(value_of(*lib), 90 + round);
    EXPECT_FALSE(watch.planted_code_ran()) << header << " was compiled in";
    EXPECT_NE(err.find("not using the precompiled includes in "), std::string::npos) << err;
    EXPECT_NE(err.find(round == 0 ? "writable by every user" : "not the header ember writes"),
              std::string::npos)
        << err;
    compiler::clear_memory_cache();
    remove_tree(dir);
  }
}

// ---- what the cache itself creates ----

TEST(KernelCache, CreatesPrivateDirectoriesAndLibrariesWhateverTheUmask) {
  ScopedEnv no_pch("EMBER_PCH", "0");
  const std::string root = fresh_dir("create");
  const std::string dir = root + "/a/b";
  const mode_t old_umask = ::umask(0);  // the most permissive: nothing taken away
  auto lib = load_in(dir, value_source(101));
  ::umask(old_umask);
  EXPECT_EQ(value_of(*lib), 101);
  EXPECT_TRUE(starts_with(lib->path(), dir + "/")) << lib->path();
  for (const std::string& d : {root, root + "/a", dir}) EXPECT_EQ(mode_of(d), 0700u) << d;
  EXPECT_EQ(mode_of(lib->path()) & 022, 0u) << lib->path();
  // And it loads from disk as published: whole, and ours alone.
  const auto before = compiler::toolchain_stats();
  auto again = load_in(dir, value_source(101));
  const auto after = compiler::toolchain_stats();
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  EXPECT_EQ(after.rebuilds, before.rebuilds);
  compiler::clear_memory_cache();
  remove_tree(root);
}

}  // namespace
}  // namespace ember
