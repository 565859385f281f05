// Atomic saves: a write that fails or a process that dies mid-write leaves the previous file
// whole, and a failed save raises an Error and cleans up its temporary file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember/io.h"
#include "io/file_io.h"
#include "io/io_test_util.h"

namespace ember::test {
namespace {

// Lowers this process's file size limit (RLIMIT_FSIZE) for the scope: writes past it fail
// with EFBIG, for root as for anyone, which is a real mid-write failure.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);  // report EFBIG instead of killing us
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
  bool ok_ = false;
};

io::NamedTensors big_tensors() {
  return {{"a", patterned_tensor({1 << 16}, DType::Float32, 1)},
          {"b", patterned_tensor({300, 200}, DType::Float64, 2).t()}};
}

TEST(AtomicWrite, FailedWriteKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  io::NamedTensors old = {{"old", patterned_tensor({10}, DType::Float32, 7)}};
  io::save_safetensors(path, old);
  const std::vector<std::byte> before = read_bytes(path);
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    EXPECT_ERROR_WITH(io::save_safetensors(path, big_tensors()), "File too large");
    EXPECT_ERROR_WITH(io::save_safetensors(path, big_tensors()), "the previous file is unchanged");
    io::Checkpoint ck;
    ck.model = big_tensors();
    EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), path);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"})
      << "the temporary file is removed";
  EXPECT_EQ(io::load_safetensors(path).tensors[0].first, "old");
}

TEST(AtomicWrite, ProcessKilledMidWriteKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  io::save_safetensors(path, {{"old", patterned_tensor({10}, DType::Float32, 7)}});
  const std::vector<std::byte> before = read_bytes(path);
  const io::NamedTensors big = big_tensors();

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child dies of SIGXFSZ in the middle of writing, as a crash would stop it.
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGXFSZ, SIG_DFL);
    rlimit lim{};
    getrlimit(RLIMIT_FSIZE, &lim);
    lim.rlim_cur = 8192;
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      io::save_safetensors(path, big);
    } catch (...) {
    }
    _exit(0);  // only reached if the write did not die
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was meant to die mid-write";
  EXPECT_EQ(WTERMSIG(status), SIGXFSZ);

  EXPECT_EQ(read_bytes(path), before) << "the previous file survives the crash";
  EXPECT_EQ(io::load_safetensors(path).tensors[0].first, "old");
  // The crash leaves its partial temporary file beside the target, never in its place.
  std::vector<std::string> names = dir.entries();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "ckpt.safetensors");
  EXPECT_EQ(names[1].rfind("ckpt.safetensors.tmp.", 0), 0u) << names[1];
  EXPECT_ERROR_WITH(io::load_safetensors(dir.file(names[1])), "safetensors");
  // A later save succeeds regardless of the stale temporary.
  io::save_safetensors(path, big);
  EXPECT_EQ(io::load_safetensors(path).tensors.size(), 2u);
}

TEST(AtomicWrite, TemporaryThatCannotBeCreatedIsAnError) {
  TempDir dir;
  const std::string path = dir.file("missing/model.safetensors");
  EXPECT_ERROR_WITH(io::save_safetensors(path, big_tensors()), "cannot create the temporary file");
  EXPECT_ERROR_WITH(io::save_safetensors(path, big_tensors()), "missing/model.safetensors");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicWrite, LongFileNamesStillGetATemporary) {
  TempDir dir;
  const std::string name(250, 'n');  // near NAME_MAX: the temporary's name is shortened
  io::save_safetensors(dir.file(name), big_tensors());
  io::save_safetensors(dir.file(name), {{"x", patterned_tensor({2}, DType::Int64, 1)}});
  EXPECT_EQ(io::load_safetensors(dir.file(name)).tensors[0].first, "x");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{name});
}

TEST(AtomicWrite, ReadOnlyDirectoryWhenPermissionsApply) {
  TempDir dir;
  const std::string sub = dir.file("ro");
  std::filesystem::create_directory(sub);
  const std::string path = sub + "/m.safetensors";
  io::save_safetensors(path, {{"old", patterned_tensor({3}, DType::Int32, 1)}});
  const std::vector<std::byte> before = read_bytes(path);
  std::filesystem::permissions(
      sub, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  // Root writes into read-only directories anyway; then the save must simply succeed.
  bool permissions_apply = access(sub.c_str(), W_OK) != 0;
  if (permissions_apply) {
    EXPECT_ERROR_WITH(io::save_safetensors(path, big_tensors()), "Permission denied");
    EXPECT_EQ(read_bytes(path), before);
  } else {
    io::save_safetensors(path, big_tensors());
    EXPECT_EQ(io::load_safetensors(path).tensors.size(), 2u);
  }
  std::filesystem::permissions(sub, std::filesystem::perms::owner_all);
}

TEST(AtomicWrite, RenameOverADirectoryFailsCleanly) {
  TempDir dir;
  // A directory in the target's place: the temporary is written, the rename is refused.
  io::AtomicFileWriter w(dir.file("x"));
  std::filesystem::create_directory(dir.file("x"));
  std::filesystem::create_directory(dir.file("x/inside"));
  w.write("abc", 3);
  EXPECT_ERROR_WITH(w.commit(), "renaming");
}

TEST(AtomicWrite, WriterCommitsExactBytes) {
  TempDir dir;
  std::vector<std::byte> bytes(3 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 % 251);
  {
    io::AtomicFileWriter w(dir.file("f"));
    w.write(bytes.data(), 10);                      // buffered
    w.write(bytes.data() + 10, bytes.size() - 20);  // larger than the buffer
    w.write(bytes.data() + bytes.size() - 10, 10);
    w.commit();
  }
  EXPECT_EQ(read_bytes(dir.file("f")), bytes);
  {
    io::AtomicFileWriter w(dir.file("f"));
    w.write("partial", 7);
  }  // abandoned without commit
  EXPECT_EQ(read_bytes(dir.file("f")), bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f"});
}

}  // namespace
}  // namespace ember::test
