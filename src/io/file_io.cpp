// POSIX file helpers for src/io: atomic replacement and checked reads.
#include "io/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ember/error.h"

namespace ember::io {

namespace {

constexpr size_t kWriteBufferBytes = size_t(1) << 20;

std::string sys_error() {
  return std::strerror(errno);
}

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A name no other writer (thread or process) picks at the same time.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t ticks = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(ticks % 1000000007u);
}

// "<dir>/<name>.tmp.<unique>", with <name> shortened so that the temporary's name stays
// within the usual 255-byte limit even when the target's own name is near it.
std::string temp_name_for(const std::string& path) {
  std::filesystem::path p(path);
  std::string name = p.filename().string().substr(0, 180);
  return (p.parent_path() / (name + ".tmp." + unique_suffix())).string();
}

// Makes the rename itself durable; filesystems without directory fsync answer EINVAL.
void sync_directory(const std::string& dir, const std::string& path) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EMBER_CHECK(dfd >= 0, "save ", path, ": cannot open directory ", dir,
              " to flush it: ", sys_error());
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  EMBER_CHECK(rc == 0 || err == EINVAL, "save ", path, ": flushing directory ", dir,
              " failed: ", std::strerror(err));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  EMBER_CHECK(!path_.empty(), "save: empty file name");
  std::error_code ec;
  EMBER_CHECK(!std::filesystem::is_directory(path_, ec), "save ", path_,
              ": is a directory, not a file");
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_path_ = temp_name_for(path_);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  EMBER_CHECK(fd_ >= 0, "save ", path_, ": cannot create the temporary file ", temp_path_, " in ",
              parent_dir(path_), ": ", sys_error(), " (the directory must exist and be writable)");
  buffer_.reserve(kWriteBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abandon();
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write_fully(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    EMBER_CHECK(n > 0, "save ", path_, ": writing ", temp_path_,
                " failed: ", n < 0 ? sys_error() : "no progress",
                "; the previous file is unchanged");
    p += n;
    nbytes -= size_t(n);
  }
}

void AtomicFileWriter::flush_buffer() {
  if (!buffer_.empty()) write_fully(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFileWriter::write(const void* data, size_t nbytes) {
  EMBER_CHECK(fd_ >= 0 && !committed_, "save ", path_, ": write after commit");
  if (nbytes == 0) return;
  if (buffer_.size() + nbytes > kWriteBufferBytes) flush_buffer();
  if (nbytes >= kWriteBufferBytes) {
    write_fully(data, nbytes);
  } else {
    const auto* b = static_cast<const std::byte*>(data);
    buffer_.insert(buffer_.end(), b, b + nbytes);
  }
}

void AtomicFileWriter::commit() {
  EMBER_CHECK(fd_ >= 0 && !committed_, "save ", path_, ": commit called twice");
  flush_buffer();
  EMBER_CHECK(::fsync(fd_) == 0, "save ", path_, ": flushing ", temp_path_,
              " to disk failed: ", sys_error(), "; the previous file is unchanged");
  int rc = ::close(fd_);
  fd_ = -1;
  EMBER_CHECK(rc == 0, "save ", path_, ": closing ", temp_path_, " failed: ", sys_error(),
              "; the previous file is unchanged");
  EMBER_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "save ", path_, ": renaming ",
              temp_path_, " over it failed: ", sys_error(), "; the previous file is unchanged");
  committed_ = true;
  sync_directory(parent_dir(path_), path_);
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

ReadFile::ReadFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  EMBER_CHECK(fd_ >= 0, "cannot open ", path_, ": ", sys_error());
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    std::string why = sys_error();
    ::close(fd_);
    EMBER_FAIL("cannot read ", path_, ": ", why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    EMBER_FAIL("cannot read ", path_, ": ",
               S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file");
  }
  size_ = uint64_t(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read_at(uint64_t offset, void* out, size_t nbytes) const {
  char* p = static_cast<char*>(out);
  while (nbytes > 0) {
    ssize_t n = ::pread(fd_, p, nbytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    EMBER_CHECK(n >= 0, "reading ", path_, " failed: ", sys_error());
    EMBER_CHECK(n > 0, "reading ", path_, ": the file ended at byte ", offset,
                " (was it truncated while being read?)");
    p += n;
    offset += uint64_t(n);
    nbytes -= size_t(n);
  }
}

std::vector<std::byte> read_whole_file(const std::string& path) {
  ReadFile f(path);
  EMBER_CHECK(f.size() <= uint64_t(SIZE_MAX), "cannot read ", path, ": too large");
  std::vector<std::byte> bytes(size_t(f.size()));
  f.read_at(0, bytes.data(), bytes.size());
  return bytes;
}

}  // namespace ember::io
