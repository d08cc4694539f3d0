// docs/errors.md cannot drift: its table lists exactly the status codes of fflite.h with their
// values, and every one of them is produced here through the C API.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <cctype>
#include <string>
#include <vector>

#include "base/tsan.h"
#include "c_status.h"
#include "fflite/fflite.h"
#include "format/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"

namespace fflite {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(FFLITE_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// name -> value for every "<prefix>FFLITE_STATUS_NAME<infix>VALUE" in `text`. (Hand-written:
// std::regex trips GCC 12's -Wmaybe-uninitialized under ASan.)
std::map<std::string, int> Scan(const std::string& text, const std::string& prefix,
                                const std::string& infix) {
  std::map<std::string, int> found;
  const std::string key = prefix + "FFLITE_STATUS_";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    size_t end = at + prefix.size();
    while (end < text.size() && (std::isupper(static_cast<unsigned char>(text[end])) ||
                                 text[end] == '_')) {
      ++end;
    }
    if (text.compare(end, infix.size(), infix) != 0) continue;
    const size_t digits = end + infix.size();
    if (digits >= text.size() || !std::isdigit(static_cast<unsigned char>(text[digits]))) continue;
    found[text.substr(at + prefix.size(), end - at - prefix.size())] = std::stoi(text.substr(digits));
  }
  return found;
}

TEST(ErrorsDocTest, TableMatchesTheHeader) {
  const auto header = Scan(ReadSource("runtime/include/fflite/fflite.h"), "", " = ");
  const auto doc = Scan(ReadSource("docs/errors.md"), "| `", "` | ");
  EXPECT_GE(header.size(), 10u);
  EXPECT_EQ(doc, header) << "docs/errors.md and fflite.h disagree: update the table";
  for (const auto& [name, value] : header) {
    EXPECT_EQ("FFLITE_STATUS_" + std::string(fflite_status_name(static_cast<fflite_status>(value))),
              name);
  }
}

class StatusProducedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::Rng rng(1);
    ModelSpec spec;
    spec.d_model = 8;
    testing::FfnParams fp;
    fp.d_model = 8;
    LayerSpec l;
    l.ffn = testing::RandomFfn(fp, rng);
    spec.layers.push_back(std::move(l));
    auto bytes = WriteModelBuffer(spec, WriteOptions());
    ASSERT_TRUE(bytes.ok());
    bytes_ = std::move(*bytes);
  }
  std::vector<uint8_t> bytes_;
};

TEST_F(StatusProducedTest, Ok) {
  fflite_model* model = nullptr;
  EXPECT_EQ(fflite_model_load_buffer(bytes_.data(), bytes_.size(), &model), FFLITE_STATUS_OK);
  EXPECT_STREQ(fflite_last_error_message(), "");
  fflite_model_free(model);
}

TEST_F(StatusProducedTest, InvalidArgument) {
  fflite_model* model = nullptr;
  EXPECT_EQ(fflite_model_load_file(nullptr, &model), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(fflite_model_load_file("/", &model), FFLITE_STATUS_INVALID_ARGUMENT);
}

TEST_F(StatusProducedTest, OutOfRangeAndUnavailable) {
  fflite_model* model = nullptr;
  ASSERT_EQ(fflite_model_load_buffer(bytes_.data(), bytes_.size(), &model), FFLITE_STATUS_OK);
  fflite_layer_info info;
  info.struct_size = sizeof(info);
  EXPECT_EQ(fflite_model_layer_info(model, 1, &info), FFLITE_STATUS_OUT_OF_RANGE);
  fflite_session_options options;
  fflite_session_options_init(&options);
  options.backend = FFLITE_BACKEND_CUDA;
  fflite_session* session = nullptr;
  const fflite_status st = fflite_session_create(model, &options, &session);
  if (st == FFLITE_STATUS_OK) {
    fflite_session_free(session);
    GTEST_SKIP() << "this build has a working CUDA backend, so UNAVAILABLE cannot be produced";
  }
  EXPECT_EQ(st, FFLITE_STATUS_UNAVAILABLE);
  fflite_model_free(model);
}

TEST_F(StatusProducedTest, InvalidModelAndUnsupported) {
  fflite_model* model = nullptr;
  std::vector<uint8_t> bad = bytes_;
  bad[9] = 'X';
  EXPECT_EQ(fflite_model_load_buffer(bad.data(), bad.size(), &model), FFLITE_STATUS_INVALID_MODEL);
  bad = bytes_;
  ASSERT_TRUE(schema::GetMutableSizePrefixedModel(bad.data())->mutate_version_major(99));
  EXPECT_EQ(fflite_model_load_buffer(bad.data(), bad.size(), &model), FFLITE_STATUS_UNSUPPORTED);
  EXPECT_THAT(fflite_last_error_message(), ::testing::HasSubstr("newer"));
}

TEST_F(StatusProducedTest, NotFoundAndIoError) {
  fflite_model* model = nullptr;
  EXPECT_EQ(fflite_model_load_file("/nonexistent/model.fflite", &model), FFLITE_STATUS_NOT_FOUND);
  // A symbolic link loop cannot be opened (ELOOP).
  char dir[] = "/tmp/fflite_errors_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b";
  ASSERT_EQ(symlink(a.c_str(), b.c_str()), 0);
  ASSERT_EQ(symlink(b.c_str(), a.c_str()), 0);
  EXPECT_EQ(fflite_model_load_file(a.c_str(), &model), FFLITE_STATUS_IO_ERROR);
  EXPECT_THAT(fflite_last_error_message(), ::testing::HasSubstr(a));
  unlink(a.c_str());
  unlink(b.c_str());
  rmdir(dir);
}

// Whether this build runs under AddressSanitizer or ThreadSanitizer (FFLITE_HAS_TSAN, base/tsan.h):
// g++ says so with macros, clang with __has_feature (the test command's TSan stage is clang's).
#if defined(FFLITE_HAS_TSAN) || defined(__SANITIZE_ADDRESS__)
#define FFLITE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FFLITE_TEST_SANITIZED 1
#endif
#endif

// A model file larger than the address space left to the process cannot be mapped. The child
// process gets a small address-space limit; the file is sparse, so it costs no disk.
TEST_F(StatusProducedTest, OutOfMemory) {
#if defined(FFLITE_TEST_SANITIZED)
  GTEST_SKIP() << "sanitizer runtimes reserve terabytes of address space; RLIMIT_AS cannot be "
                  "used under them (this test runs in the plain build)";
#else
  if (std::getenv("FFLITE_UNDER_QEMU") != nullptr) {  // set by the cross toolchains' emulator
    GTEST_SKIP() << "qemu-user ignores a guest's RLIMIT_AS (it needs the address space itself), "
                    "so the limit this test relies on cannot be set; it runs natively";
  }
  char path[] = "/tmp/fflite_big_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{8} << 30), 0);  // 8 GiB, sparse
  close(fd);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit limit = {rlim_t{4} << 30, rlim_t{4} << 30};  // 4 GiB of address space
    setrlimit(RLIMIT_AS, &limit);
    fflite_model* model = nullptr;
    _exit(fflite_model_load_file(path, &model));
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  unlink(path);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), FFLITE_STATUS_OUT_OF_MEMORY);
#endif
}

// INTERNAL is for bugs only, so no public call produces it on purpose; the mapping that would
// report one (and every other code) is checked here.
TEST(StatusMappingTest, EveryAbslCodeMaps) {
  EXPECT_EQ(ToCStatus(absl::StatusCode::kOk), FFLITE_STATUS_OK);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kInvalidArgument), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kOutOfRange), FFLITE_STATUS_OUT_OF_RANGE);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kDataLoss), FFLITE_STATUS_INVALID_MODEL);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kUnimplemented), FFLITE_STATUS_UNSUPPORTED);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kNotFound), FFLITE_STATUS_NOT_FOUND);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kUnavailable), FFLITE_STATUS_IO_ERROR);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kPermissionDenied), FFLITE_STATUS_IO_ERROR);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kResourceExhausted), FFLITE_STATUS_OUT_OF_MEMORY);
  EXPECT_EQ(ToCStatus(absl::StatusCode::kFailedPrecondition), FFLITE_STATUS_UNAVAILABLE);
  for (auto code : {absl::StatusCode::kInternal, absl::StatusCode::kAborted,
                    absl::StatusCode::kUnknown, absl::StatusCode::kCancelled}) {
    EXPECT_EQ(ToCStatus(code), FFLITE_STATUS_INTERNAL);
  }
}

}  // namespace
}  // namespace fflite
