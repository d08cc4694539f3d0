// fflite-neurons end to end: the built tool runs the test model's dense and MoE layers in text and
// JSON, and what it prints is checked against a session of the same model run here (h captured,
// ‖v‖ from ValueNorms, ranked the same way), and for its own consistency (contribution =
// weight·|h|·‖v‖ of the printed values, largest first). Every bad input exits 1 with one line.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "format/model.h"
#include "format/value_norms.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "session/session.h"
#include "testing/checkpoint_writer.h"
#include "testing/model_builder.h"

#ifndef FFLITE_NEURONS_BIN
#error "FFLITE_NEURONS_BIN must name the fflite-neurons binary"
#endif
#ifndef FFLITE_TOOL_EMULATOR
#error "FFLITE_TOOL_EMULATOR must be the emulator's command line ('' for a native build)"
#endif
#ifndef FFLITE_TEST_MODEL
#error "FFLITE_TEST_MODEL must name the test model file (the make_test_model fixture)"
#endif

namespace fflite {
namespace {

// Printed values against the values computed here: text prints 6 significant digits (%.6g: a
// relative rounding of at most 5e-6), JSON 9 (%.9g: every f32 exactly, a double to 5e-9). The
// tool and this test run the same reference backend on the same tokens, so h is the same bits;
// ‖v‖ is the same ValueNorms. Only the printing differs, plus 1e-12 absolute for values near 0.
constexpr double kTextRelTol = 1e-5;
constexpr double kJsonRelTol = 1e-8;
constexpr double kAbsTol = 1e-12;

struct RunResult {
  int status = -1;  // exit status, or -1 if the tool did not exit normally (a crash)
  std::string out, err;
};

// Runs fflite-neurons with `args`, stdout and stderr into files of `dir` (a folder of its own, so
// that the inputs' folder can be checked for anything the tool writes).
RunResult RunTool(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s;
  // Cross builds: the emulator's command line first (FFLITE_TOOL_EMULATOR, '|'-separated).
  const std::string emulator = FFLITE_TOOL_EMULATOR;
  for (size_t start = 0; start < emulator.size();) {
    const size_t bar = std::min(emulator.find('|', start), emulator.size());
    argv_s.push_back(emulator.substr(start, bar - start));
    start = bar + 1;
  }
  argv_s.push_back(FFLITE_NEURONS_BIN);
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) ::_exit(126);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  RunResult r;
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus)) r.status = WEXITSTATUS(wstatus);
  EXPECT_TRUE(testing::ReadFileBytes(out_path, &r.out).ok());
  EXPECT_TRUE(testing::ReadFileBytes(err_path, &r.err).ok());
  return r;
}

void WriteF32(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  ASSERT_TRUE(f.good()) << path;
}

struct NeuronOut {
  uint32_t index = 0;
  double h = 0, norm = 0, contribution = 0;
};
// One FFN of one token: the dense FFN (expert -1) or a routed expert.
struct FfnOut {
  int expert = -1;
  double weight = 1.0;
  double sparsity = 0;
  uint32_t zeros = 0;
  std::vector<NeuronOut> neurons;
};
using TokenOut = std::vector<FfnOut>;

// What the tool should print: a reference session of the same model with capture, ‖v‖ from
// ValueNorms, the top `top` by weight·|h|·‖v‖ (ties by index).
std::vector<TokenOut> Expected(const std::string& model_path, size_t layer,
                               const std::vector<float>& input, size_t top) {
  auto model = Model::LoadFile(model_path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  const LayerView& view = (*model)->layers()[layer];
  const bool moe = view.kind == LayerKind::kMoe;
  const size_t d = (*model)->d_model(), n = input.size() / d;
  const size_t d_ff = moe ? view.moe.experts[0].d_ff : view.ffn.d_ff;
  const size_t top_k = moe ? view.moe.top_k : 1;
  SessionOptions so;
  so.backend = "reference";
  so.max_tokens = n;
  auto session = Session::Create(**model, so);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  std::vector<float> h(n * top_k * d_ff), weights(moe ? n * top_k : 0), y(n * d);
  std::vector<int32_t> experts(moe ? n * top_k : 0);
  EXPECT_TRUE((*session)
                  ->SetCapture(layer, h.data(), h.size(), moe ? experts.data() : nullptr,
                               moe ? weights.data() : nullptr, experts.size())
                  .ok());
  EXPECT_TRUE((*session)->Run(layer, input.data(), n, y.data()).ok());
  std::vector<TokenOut> tokens(n);
  for (size_t t = 0; t < n; ++t) {
    for (size_t k = 0; k < top_k; ++k) {
      FfnOut f;
      const FfnView* ffn = &view.ffn;
      if (moe) {
        f.expert = experts[t * top_k + k];
        f.weight = weights[t * top_k + k];
        ffn = &view.moe.experts[static_cast<size_t>(f.expert)];
      }
      std::vector<double> norms;
      EXPECT_TRUE(ValueNorms(*ffn, &norms).ok());
      const float* ht = &h[(t * top_k + k) * d_ff];
      std::vector<NeuronOut> all(d_ff);
      for (size_t i = 0; i < d_ff; ++i) {
        f.zeros += ht[i] == 0.0f;
        all[i] = {static_cast<uint32_t>(i), ht[i], norms[i],
                  std::fabs(f.weight) * std::fabs(double{ht[i]}) * norms[i]};
      }
      std::stable_sort(all.begin(), all.end(), [](const NeuronOut& a, const NeuronOut& b) {
        return a.contribution > b.contribution;
      });
      all.resize(std::min(top, d_ff));
      f.neurons = all;
      f.sparsity = static_cast<double>(f.zeros) / static_cast<double>(d_ff);
      tokens[t].push_back(f);
    }
  }
  return tokens;
}

// The text output, parsed: a header line, then per token "token T: ..." (dense: its sparsity;
// MoE: its experts, then "  expert E, rank K, weight W: sparsity ..." per expert), each followed
// by its neuron lines "neuron I  h H  |v| N  contribution C".
std::vector<TokenOut> ParseText(const std::string& text, bool moe) {
  std::vector<TokenOut> tokens;
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_FALSE(lines.empty());
  for (size_t l = 1; l < lines.size(); ++l) {
    const std::string& line = lines[l];
    size_t t = 0;
    double sparsity = 0;
    unsigned zeros = 0, of = 0;
    FfnOut f;
    char rest[64];
    if (std::sscanf(line.c_str(), "token %zu: %63s", &t, rest) == 2) {
      EXPECT_EQ(t, tokens.size()) << line;
      tokens.emplace_back();
      if (!moe) {
        EXPECT_EQ(std::sscanf(line.c_str(), "token %zu: sparsity %lf (%u of %u h are 0)", &t,
                              &sparsity, &zeros, &of),
                  4)
            << line;
        f.sparsity = sparsity;
        f.zeros = zeros;
        tokens.back().push_back(f);
      }
    } else if (int k = 0; std::sscanf(line.c_str(),
                                       "  expert %d, rank %d, weight %lf: sparsity %lf (%u of %u",
                                       &f.expert, &k, &f.weight, &sparsity, &zeros, &of) == 6) {
      EXPECT_TRUE(moe) << line;
      EXPECT_FALSE(tokens.empty()) << line;
      if (tokens.empty()) return {};
      EXPECT_EQ(static_cast<size_t>(k), tokens.back().size()) << line;
      f.sparsity = sparsity;
      f.zeros = zeros;
      tokens.back().push_back(f);
    } else {
      NeuronOut n;
      EXPECT_EQ(std::sscanf(line.c_str(), " neuron %u h %lf |v| %lf contribution %lf", &n.index,
                            &n.h, &n.norm, &n.contribution),
                4)
          << "not a neuron line: " << line;
      EXPECT_TRUE(!tokens.empty() && !tokens.back().empty()) << line;
      if (tokens.empty() || tokens.back().empty()) return {};
      tokens.back().back().neurons.push_back(n);
    }
  }
  return tokens;
}

std::vector<TokenOut> ParseJson(const std::string& text, bool moe, size_t n_tokens) {
  std::vector<TokenOut> tokens;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << text;
    return tokens;
  }
  try {
    EXPECT_EQ(doc.at("kind").get<std::string>(), moe ? "moe" : "dense");
    EXPECT_EQ(doc.at("n_tokens").get<size_t>(), n_tokens);
    EXPECT_EQ(doc.at("d_model").get<int>(), 16);
    EXPECT_EQ(doc.at("d_ff").get<int>(), 40);
    EXPECT_EQ(doc.at("backend").get<std::string>(), "reference");
    auto neurons_of = [](const nlohmann::json& j, FfnOut* f) {
      f->sparsity = j.at("sparsity").get<double>();
      f->zeros = j.at("zeros").get<uint32_t>();
      for (const nlohmann::json& n : j.at("neurons")) {
        f->neurons.push_back({n.at("index").get<uint32_t>(), n.at("h").get<double>(),
                              n.at("value_norm").get<double>(),
                              n.at("contribution").get<double>()});
      }
    };
    for (const nlohmann::json& t : doc.at("tokens")) {
      EXPECT_EQ(t.at("token").get<size_t>(), tokens.size());
      tokens.emplace_back();
      if (!moe) {
        FfnOut f;
        neurons_of(t, &f);
        tokens.back().push_back(f);
        continue;
      }
      for (const nlohmann::json& e : t.at("experts")) {
        EXPECT_EQ(e.at("rank").get<size_t>(), tokens.back().size());
        FfnOut f;
        f.expert = e.at("expert").get<int>();
        f.weight = e.at("weight").get<double>();
        neurons_of(e, &f);
        tokens.back().push_back(f);
      }
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "JSON of the wrong shape: " << e.what() << "\n" << text;
  }
  return tokens;
}

bool Near(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * std::fabs(want) + kAbsTol;
}

// got (printed) against want (computed here), and got against itself.
void Compare(const std::vector<TokenOut>& got, const std::vector<TokenOut>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(got[t].size(), want[t].size()) << "token " << t;
    for (size_t k = 0; k < got[t].size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "token " << t << ", rank " << k);
      const FfnOut &g = got[t][k], &w = want[t][k];
      EXPECT_EQ(g.expert, w.expert);
      EXPECT_TRUE(Near(g.weight, w.weight, rel)) << g.weight << " vs " << w.weight;
      EXPECT_EQ(g.zeros, w.zeros);
      EXPECT_TRUE(Near(g.sparsity, w.sparsity, 1e-4)) << g.sparsity << " vs " << w.sparsity;
      ASSERT_EQ(g.neurons.size(), w.neurons.size());
      for (size_t i = 0; i < g.neurons.size(); ++i) {
        const NeuronOut &gn = g.neurons[i], &wn = w.neurons[i];
        EXPECT_EQ(gn.index, wn.index) << "place " << i;
        EXPECT_TRUE(Near(gn.h, wn.h, rel)) << gn.h << " vs " << wn.h;
        EXPECT_TRUE(Near(gn.norm, wn.norm, rel)) << gn.norm << " vs " << wn.norm;
        EXPECT_TRUE(Near(gn.contribution, wn.contribution, rel))
            << gn.contribution << " vs " << wn.contribution;
        // Consistent in itself: contribution = weight·|h|·‖v‖ of the printed values (each
        // rounded once, so three roundings), and largest first.
        EXPECT_TRUE(Near(gn.contribution, std::fabs(g.weight * gn.h) * gn.norm, 4 * rel))
            << "neuron " << gn.index;
        if (i > 0) {
          EXPECT_GE(g.neurons[i - 1].contribution, gn.contribution);
        }
      }
    }
  }
}

class NeuronsToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    io_dir_ = testing::MakeTempDir();
    // 7 tokens; token 3 is all zeros: the pre-norm keeps it 0, so every h is exactly 0
    // (sparsity 1, contributions all 0, neurons ranked by index).
    testing::Rng rng(5);
    input_ = rng.Vec(7 * 16, 1.5f);
    std::fill(input_.begin() + 3 * 16, input_.begin() + 4 * 16, 0.0f);
    input_path_ = dir_ + "/tokens.f32";
    WriteF32(input_path_, input_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove_all(io_dir_, ec);
  }

  void CheckLayer(size_t layer, bool moe, const std::vector<float>& input,
                  const std::string& input_path, size_t top) {
    const std::vector<TokenOut> want = Expected(FFLITE_TEST_MODEL, layer, input, top);
    const std::vector<std::string> args = {FFLITE_TEST_MODEL,
                                           "--layer", std::to_string(layer),
                                           "--input", input_path,
                                           "--top", std::to_string(top),
                                           "--backend", "reference"};
    {
      SCOPED_TRACE("text");
      const RunResult r = RunTool(io_dir_, args);
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.err, "");
      EXPECT_TRUE(absl::StrContains(r.out, moe ? "moe" : "dense")) << r.out;
      Compare(ParseText(r.out, moe), want, kTextRelTol);
    }
    {
      SCOPED_TRACE("json");
      std::vector<std::string> json_args = args;
      json_args.push_back("--json");
      const RunResult r = RunTool(io_dir_, json_args);
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.err, "");
      Compare(ParseJson(r.out, moe, input.size() / 16), want, kJsonRelTol);
    }
  }

  std::string dir_, io_dir_, input_path_;
  std::vector<float> input_;
};

TEST_F(NeuronsToolTest, DenseLayer) {
  CheckLayer(0, /*moe=*/false, input_, input_path_, 5);
  // The zero token: every h is 0.
  const std::vector<TokenOut> want = Expected(FFLITE_TEST_MODEL, 0, input_, 5);
  ASSERT_EQ(want.size(), 7u);
  EXPECT_EQ(want[3][0].zeros, 40u);
  EXPECT_EQ(want[3][0].neurons[0].index, 0u);
}

TEST_F(NeuronsToolTest, MoeLayer) { CheckLayer(1, /*moe=*/true, input_, input_path_, 3); }

// More neurons asked for than d_ff: all of them.
TEST_F(NeuronsToolTest, TopAboveDff) { CheckLayer(1, /*moe=*/true, input_, input_path_, 100); }

// More tokens than one session call takes (512): run in chunks, numbered on.
TEST_F(NeuronsToolTest, ManyTokensRunInChunks) {
  testing::Rng rng(6);
  const std::vector<float> input = rng.Vec(600 * 16, 1.0f);
  const std::string path = dir_ + "/many.f32";
  WriteF32(path, input);
  CheckLayer(0, /*moe=*/false, input, path, 2);
}

TEST_F(NeuronsToolTest, BadInputsExitOneWithOneLine) {
  // A malformed model: the test model cut short; a file of garbage; an empty input; a token and
  // a half; the input a folder.
  std::string model_bytes;
  ASSERT_TRUE(testing::ReadFileBytes(FFLITE_TEST_MODEL, &model_bytes).ok());
  const std::string cut = dir_ + "/cut.fflite";
  ASSERT_TRUE(testing::WriteTextFile(cut, model_bytes.substr(0, model_bytes.size() / 2)).ok());
  const std::string garbage = dir_ + "/garbage.fflite";
  ASSERT_TRUE(testing::WriteTextFile(garbage, std::string(4096, 'x')).ok());
  const std::string empty = dir_ + "/empty.f32";
  ASSERT_TRUE(testing::WriteTextFile(empty, "").ok());
  const std::string ragged = dir_ + "/ragged.f32";
  WriteF32(ragged, std::vector<float>(24, 1.0f));
  const std::vector<std::string> before = testing::ListDir(dir_);

  const std::string m = FFLITE_TEST_MODEL, in = input_path_;
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--layer", "0", "--input", in}, "give one model file"},
      {{dir_ + "/missing.fflite", "--layer", "0", "--input", in}, "missing.fflite"},
      {{cut, "--layer", "0", "--input", in}, "model: "},
      {{garbage, "--layer", "0", "--input", in}, "garbage.fflite"},
      {{m, "--input", in}, "--layer L is required"},
      {{m, "--layer", "2", "--input", in}, "--layer 2: out of range"},
      {{m, "--layer", "-1", "--input", in}, "--layer -1: out of range"},
      {{m, "--layer", "one", "--input", in}, "--layer one: not an integer"},
      {{m, "--layer", "0"}, "--input FILE.f32 is required"},
      {{m, "--layer", "0", "--input", dir_ + "/missing.f32"}, "cannot open"},
      {{m, "--layer", "0", "--input", empty}, "the file is empty"},
      {{m, "--layer", "0", "--input", ragged}, "96 bytes is not a multiple of 4 * d_model = 64"},
      {{m, "--layer", "0", "--input", dir_}, "not a regular file"},
      {{m, "--layer", "0", "--input", in, "--top", "0"}, "--top 0: must be >= 1"},
      {{m, "--layer", "0", "--input", in, "--top", "-4"}, "--top -4: must be >= 1"},
      {{m, "--layer", "0", "--input", in, "--backend", "tpu"}, "--backend tpu: unknown backend"},
      {{m, "--layer", "0", "--input", in, "--threads", "0"}, "--threads 0: must be >= 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.args, " "));
    const RunResult r = RunTool(io_dir_, c.args);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(absl::StartsWith(r.err, "fflite-neurons: ")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.message)) << r.err;
    // Exactly one line.
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(absl::EndsWith(r.err, "\n")) << r.err;
  }
  // Nothing written next to the inputs.
  EXPECT_EQ(testing::ListDir(dir_), before);
}

}  // namespace
}  // namespace fflite
