// Bounded JSON parsing: size and depth caps checked before nlohmann-json sees the text, and every
// failure returned as a Status that names the file.
#include "converter/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fflite {
namespace converter {
namespace {

// Nesting depth of `text`, counting brackets outside strings; stops early past the cap.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) max_depth = depth;
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& what) {
  if (JsonDepth(text) > kMaxJsonDepth) {
    return absl::DataLossError(
        absl::StrFormat("%s: JSON nests deeper than the limit of %d levels", what, kMaxJsonDepth));
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with a SAX handler only to learn where it failed (no exceptions either way).
    struct Where : nlohmann::json_sax<nlohmann::json> {
      size_t pos = 0;
      std::string msg;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override { return true; }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return true; }
      bool key(string_t&) override { return true; }
      bool end_object() override { return true; }
      bool start_array(std::size_t) override { return true; }
      bool end_array() override { return true; }
      bool parse_error(std::size_t position, const std::string&,
                       const nlohmann::detail::exception& ex) override {
        pos = position;
        msg = ex.what();
        return false;
      }
    } where;
    nlohmann::json::sax_parse(text.begin(), text.end(), &where);
    // The parser quotes the bytes it read, which may be anything: keep the message printable.
    std::string msg;
    for (unsigned char c : where.msg) {
      if (c >= 0x20 && c < 0x7f) {
        msg.push_back(static_cast<char>(c));
      } else {
        msg += absl::StrFormat("\\x%02x", c);
      }
    }
    return absl::DataLossError(absl::StrFormat("%s: not valid JSON (byte %d: %s)", what, where.pos,
                                               msg));
  }
  return j;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrFormat("cannot open '%s': %s", path, std::strerror(err));
    return err == ENOENT || err == ENOTDIR ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("'%s' is not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s': %d bytes exceeds the limit of %d bytes for a JSON file", path, st.st_size,
        max_bytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return ParseJson(text, absl::StrFormat("'%s'", path));
}

std::string JsonSnippet(const nlohmann::json& value) {
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true,
                             nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace converter
}  // namespace fflite
