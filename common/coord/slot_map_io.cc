#include "common/coord/slot_map_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace eonce {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return Errno("open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("fsync", path);
}

}  // namespace

absl::StatusOr<SlotMap> ReadSlotMapFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no slot map at ", path));
    return Errno("read", path);
  }
  std::string json;
  json.resize(kMaxSlotMapBytes + 1);
  in.read(json.data(), static_cast<std::streamsize>(json.size()));
  json.resize(static_cast<size_t>(in.gcount()));
  absl::StatusOr<SlotMap> map = SlotMap::FromJson(json);
  if (!map.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", map.status().message()));
  }
  return map;
}

absl::Status WriteSlotMapFile(const std::string& path, const SlotMap& map) {
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  const std::string json = map.ToJson();
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", temporary);
  size_t written = 0;
  while (written < json.size()) {
    ssize_t n = ::write(fd, json.data() + written, json.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status failed = Errno("write", temporary);
      ::close(fd);
      ::unlink(temporary.c_str());
      return failed;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status failed = Errno("fsync", temporary);
    ::close(fd);
    ::unlink(temporary.c_str());
    return failed;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    absl::Status failed = Errno("rename", path);
    ::unlink(temporary.c_str());
    return failed;
  }
  return SyncPath(DirectoryOf(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

}  // namespace eonce
