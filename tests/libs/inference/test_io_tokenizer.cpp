// Tokenizer: libsentencepiece with openpi's Pi0 prompt format, held against the Python
// sentencepiece package on the tiny model in tests/data/tokenizer/.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "inference/io/pi0error.h"
#include "inference/io/pi0tokenizer.h"
#include "tests/pi0testio.h"

using pi0test::expect_error;

namespace
{

std::string
tiny_model ()
{
  return pi0test::source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
}

#define PI0_REQUIRE_SENTENCEPIECE()                                                                \
  do {                                                                                             \
    if (!pi0::Tokenizer::available ())                                                             \
      GTEST_SKIP () << "built without libsentencepiece";                                           \
  } while (0)

const std::vector<std::string> kPrompts = {
    "pick up the red cube",
    "  Pick_up the\nblue cup  ",
    "",
    "   \n\t ",
    "\xe3\x80\x80open\xc2\xa0the drawer\t", // U+3000 ... U+00A0 ... tab: Unicode strip()
    "Zebra 123 \xc3\xbc"
    "n\xc3\xaf"
    "c\xc3\xb6"
    "d\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac",
    "line1\r\nline2",
    "a_b_c__d",
    "\x1c\x1f hidden separators \xe2\x80\xa8",
    "put the fork to the left of the plate and the knife to the right, then stack the three blocks "
    "on "
    "top of each other and place 2 red blocks and 3 blue blocks in the box",
};

} // namespace

TEST (Tokenizer, MatchesPythonSentencepieceWithOpenpiFormat)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  PI0_REQUIRE_PYTHON ();
  const auto tok = pi0::Tokenizer::load (tiny_model ());
  pi0test::TempDir dir;
  pi0test::write_bytes (dir.file ("prompts.json"), nlohmann::json (kPrompts).dump ());
  for (int max_len : {48, 8}) {
    SCOPED_TRACE ("max_len " + std::to_string (max_len));
    std::string out;
    ASSERT_TRUE (pi0test::run_oracle (
        {"tokenize", tiny_model (), dir.file ("prompts.json"), std::to_string (max_len)}, &out))
        << out;
    const auto expected = nlohmann::json::parse (out);
    ASSERT_EQ (expected.size (), kPrompts.size ());
    int truncated = 0;
    for (size_t i = 0; i < kPrompts.size (); i++) {
      SCOPED_TRACE ("prompt " + std::to_string (i));
      EXPECT_EQ (pi0::Tokenizer::clean_prompt (kPrompts[i]),
                 expected[i]["cleaned"].get<std::string> ());
      const auto t = tok.encode_prompt (kPrompts[i], max_len);
      ASSERT_EQ (t.ids.sizes (), torch::IntArrayRef ({max_len}));
      ASSERT_EQ (t.ids.scalar_type (), torch::kInt64);
      ASSERT_EQ (t.mask.scalar_type (), torch::kBool);
      const auto ids =
          std::vector<int64_t> (t.ids.data_ptr<int64_t> (), t.ids.data_ptr<int64_t> () + max_len);
      EXPECT_EQ (ids, expected[i]["ids"].get<std::vector<int64_t>> ());
      const auto want_mask = expected[i]["mask"].get<std::vector<bool>> ();
      int n_mask = 0;
      for (int k = 0; k < max_len; k++) {
        EXPECT_EQ (t.mask[k].item<bool> (), want_mask[k]) << k;
        n_mask += want_mask[k];
      }
      EXPECT_EQ (t.n_real, n_mask);
      truncated += t.truncated;
    }
    // The long prompt is cut at 48; at 8 most prompts are.
    EXPECT_GE (truncated, max_len == 48 ? 1 : 5);
  }
}

TEST (Tokenizer, PromptLayoutBosTextAnswerTokenPadding)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  const auto tok = pi0::Tokenizer::load (tiny_model ());
  EXPECT_EQ (tok.bos_id (), 2); // the tiny model keeps PaliGemma's special ids
  EXPECT_EQ (tok.vocab_size (), 400);
  const auto text = tok.encode ("pick up the red cube");
  const auto answer = tok.encode ("\n");
  ASSERT_EQ (answer.size (), 1u);
  const auto t = tok.encode_prompt ("pick_up the red cube\n");
  const int n = static_cast<int> (1 + text.size () + 1);
  ASSERT_EQ (t.n_real, n);
  EXPECT_FALSE (t.truncated);
  EXPECT_EQ (t.ids[0].item<int64_t> (), 2);
  for (size_t i = 0; i < text.size (); i++)
    EXPECT_EQ (t.ids[1 + i].item<int64_t> (), text[i]);
  EXPECT_EQ (t.ids[n - 1].item<int64_t> (), answer[0]);
  EXPECT_TRUE (t.mask.slice (0, 0, n).all ().item<bool> ());
  EXPECT_FALSE (t.mask.slice (0, n).any ().item<bool> ());
  EXPECT_EQ (t.ids.slice (0, n).abs ().sum ().item<int64_t> (), 0); // openpi pads with 0

  // Exactly max_len tokens: not truncated, all real.
  const auto exact = tok.encode_prompt ("pick up the red cube", n);
  EXPECT_FALSE (exact.truncated);
  EXPECT_TRUE (exact.mask.all ().item<bool> ());
  const auto cut = tok.encode_prompt ("pick up the red cube", n - 1);
  EXPECT_TRUE (cut.truncated);
  EXPECT_EQ (cut.n_real, n - 1);
  EXPECT_NE (cut.ids[n - 2].item<int64_t> (), answer[0]); // the answer token is what is cut
}

TEST (Tokenizer, CleaningFollowsPython)
{
  EXPECT_EQ (pi0::Tokenizer::clean_prompt ("  a_b\nc \t"), "a b c");
  EXPECT_EQ (pi0::Tokenizer::clean_prompt ("\r\nx\r\n"), "x");
  EXPECT_EQ (pi0::Tokenizer::clean_prompt ("x\r\ny"), "x\r y"); // only '\n' is replaced inside
  EXPECT_EQ (pi0::Tokenizer::clean_prompt ("\xc2\xa0"
                                           "x\xe3\x80\x80"),
             "x");
  EXPECT_EQ (pi0::Tokenizer::clean_prompt (" \xe2\x80\x8b "),
             "\xe2\x80\x8b"); // U+200B is not whitespace
  EXPECT_EQ (pi0::Tokenizer::clean_prompt (""), "");
}

TEST (Tokenizer, ClearErrors)
{
  pi0test::TempDir dir;
  if (!pi0::Tokenizer::available ()) {
    expect_error ([&] { pi0::Tokenizer::load (tiny_model ()); }, {"without libsentencepiece"});
    return;
  }
  expect_error ([&] { pi0::Tokenizer::load (dir.file ("missing.model")); },
                {dir.file ("missing.model"), "cannot load SentencePiece model"});
  pi0test::write_bytes (dir.file ("garbage.model"), "this is not a protobuf \xff\xfe");
  expect_error ([&] { pi0::Tokenizer::load (dir.file ("garbage.model")); },
                {dir.file ("garbage.model"), "cannot load SentencePiece model"});

  const auto tok = pi0::Tokenizer::load (tiny_model ());
  expect_error ([&] { tok.encode_prompt ("bad \xc3( utf8"); }, {"not valid UTF-8", "offset 4"});
  expect_error ([&] { tok.encode_prompt ("overlong \xc0\xaf"); }, {"not valid UTF-8"});
  expect_error ([&] { tok.encode_prompt ("surrogate \xed\xa0\x80"); }, {"not valid UTF-8"});
  expect_error ([&] { tok.encode_prompt ("x", 0); }, {"max_len must be at least 1"});
  pi0::Tokenizer unloaded;
  expect_error ([&] { unloaded.encode_prompt ("x"); }, {"before Tokenizer::load()"});
}

// A corrupt model (bytes changed, file cut short) is a pi0::Error naming the file, or a model that
// loads and encodes; never a crash, and never another exception (the shim turns anything
// libsentencepiece throws into an error string: no C++ exception crosses its C entry points).
TEST (Tokenizer, CorruptModelsAreClearErrorsNotCrashes)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  std::string base;
  {
    std::ifstream in (tiny_model (), std::ios::binary);
    base.assign (std::istreambuf_iterator<char> (in), {});
  }
  ASSERT_GT (base.size (), 100u);
  pi0test::TempDir dir;
  const std::string path = dir.file ("corrupt.model");
  uint32_t rng = 12345; // a fixed LCG: the same mutants every run
  auto next = [&rng] {
    return rng = rng * 1664525u + 1013904223u;
  };
  int errors = 0, loaded = 0;
  for (int i = 0; i < 200; i++) {
    std::string m = base;
    if (i % 4 == 3) {
      m.resize (next () % m.size ()); // cut short
    } else {
      for (uint32_t k = 0, n = 1 + next () % 8; k < n; k++)
        m[next () % m.size ()] = static_cast<char> (next () >> 24);
    }
    pi0test::write_bytes (path, m);
    SCOPED_TRACE ("mutant " + std::to_string (i));
    try {
      const auto tok = pi0::Tokenizer::load (path);
      loaded++;
      try {
        (void)tok.encode_prompt ("pick up the red cube");
      } catch (const pi0::Error &e) {
        EXPECT_NE (std::string (e.what ()).find (path), std::string::npos) << e.what ();
      }
    } catch (const pi0::Error &e) {
      errors++;
      EXPECT_NE (std::string (e.what ()).find (path), std::string::npos) << e.what ();
    }
  }
  EXPECT_GT (errors, 0);
  EXPECT_EQ (errors + loaded, 200);
}

// The shim's C entry points, called directly (Tokenizer::load refuses a directory before it gets
// there): libsentencepiece throws std::ios_base::failure reading a directory, and that exception
// used to cross the C boundary and abort the process (std::terminate). Now it is an error string.
TEST (Tokenizer, ShimTurnsSentencepieceExceptionsIntoErrors)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  const char *build = std::getenv ("PI0_BUILD_ROOT");
  ASSERT_NE (build, nullptr);
  const std::string shim = std::string (build) + "/inference/io/libpi0spm.so";
  void *h = dlopen (shim.c_str (), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE (h, nullptr) << dlerror ();
  auto load = reinterpret_cast<void *(*)(const char *, char **)> (dlsym (h, "pi0spm_load"));
  ASSERT_NE (load, nullptr);
  pi0test::TempDir dir;
  char *err = nullptr;
  void *model = load (dir.path ().c_str (), &err);
  EXPECT_EQ (model, nullptr);
  ASSERT_NE (err, nullptr);
  const std::string text = err;
  std::free (err);
  EXPECT_NE (text.find ("libsentencepiece threw"), std::string::npos) << text;
  EXPECT_NE (text.find ("Is a directory"), std::string::npos) << text;
}

// Debian's libsentencepiece and LibTorch's libc10 both export FLAGS_minloglevel (an absl::Flag
// object in one, an int in the other; see inference/io/pi0spmshim.cpp). Opening the tokenizer must
// leave libc10's int alone: when sentencepiece's constructor built its flag over it, the mutex
// beside it was overwritten and the first TorchScript forward deadlocked
// (Pi0Infer.TorchScriptExceptionIsAnElementErrorAndNaNIsFlagged is that case end to end).
TEST (Tokenizer, LeavesLibTorchsFlagsAlone)
{
  auto *flag = static_cast<int *> (dlsym (RTLD_DEFAULT, "FLAGS_minloglevel"));
  if (!flag)
    GTEST_SKIP () << "this LibTorch exports no FLAGS_minloglevel: nothing can clash";
  // sentencepiece's constructors run once per process, when its module is first opened, so the
  // check runs in a fresh process: a "threadsafe" death test re-executes this binary and runs only
  // this test there (where nothing may open the module before the statement below).
  // (The style is set first: InDeathTestChild() reads it.)
  const std::string style = GTEST_FLAG_GET (death_test_style);
  GTEST_FLAG_SET (death_test_style, "threadsafe");
  if (!testing::internal::InDeathTestChild () && !pi0::Tokenizer::available ()) {
    GTEST_FLAG_SET (death_test_style, style);
    GTEST_SKIP () << "built without libsentencepiece";
  }
  EXPECT_EXIT (
      {
        *flag = 7;
        try {
          pi0::Tokenizer::load (tiny_model ());
        } catch (const std::exception &e) {
          std::fprintf (stderr, "%s\n", e.what ());
          std::_Exit (2);
        }
        std::fprintf (stderr, "FLAGS_minloglevel is %d after opening the tokenizer\n", *flag);
        std::_Exit (*flag == 7 ? 0 : 1);
      },
      testing::ExitedWithCode (0), "");
  GTEST_FLAG_SET (death_test_style, style);
}

/* Issue 16: a directory given as the tokenizer aborted the process inside SentencePiece. */
TEST (Tokenizer, DirectoryOrSpecialFileIsAClearErrorNotACrash)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  pi0test::TempDir dir;
  const std::string d = dir.path ();
  expect_error ([&] { pi0::Tokenizer::load (d); },
                {d, "cannot load SentencePiece model", "is a directory"});
  expect_error ([&] { pi0::Tokenizer::load ("/dev/null"); },
                {"/dev/null", "cannot load SentencePiece model", "not a regular file"});
}

/* pi0.5's prompt: the bins and the text that LeRobot 0.6.1's own
 * Pi05PrepareStateTokenizerProcessorStep builds (np.digitize, as openpi's tokenizer), and the
 * ids the Python sentencepiece package gives that text with BOS, as openpi encodes it
 * (tests/parity/make_lerobot_pi05_golden.py wrote tests/parity/lerobot_pi05/prompt.json). The
 * states sit on bin edges and outside [-1, 1]. */
TEST (TokenizerPi05, StateBinsPromptAndIdsMatchLeRobotAndOpenpisRule)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  std::ifstream f (pi0test::source_root () + "/tests/parity/lerobot_pi05/prompt.json");
  ASSERT_TRUE (f.good ());
  const auto golden = nlohmann::json::parse (f);
  const auto tok = pi0::Tokenizer::load (tiny_model ());
  int n = 0;
  for (const auto &c : golden.at ("cases")) {
    std::vector<double> state;
    for (const auto &v : c.at ("state"))
      state.push_back (v.get<float> ()); // LeRobot's float32 state, widened as numpy widens it
    const auto bins = pi0::Tokenizer::state_bins (state);
    EXPECT_EQ (bins, c.at ("bins").get<std::vector<int>> ());
    const std::string task = c.at ("task").get<std::string> ();
    EXPECT_EQ (pi0::Tokenizer::pi05_prompt (task, bins), c.at ("prompt").get<std::string> ());
    const auto ids = c.at ("ids").get<std::vector<int64_t>> ();
    const pi0::Tokens t = tok.encode_pi05_prompt (task, bins, 200);
    ASSERT_EQ (t.n_real, static_cast<int> (ids.size ()));
    EXPECT_FALSE (t.truncated);
    for (size_t i = 0; i < ids.size (); i++)
      EXPECT_EQ (t.ids[i].item<int64_t> (), ids[i]) << "token " << i;
    EXPECT_EQ (t.ids.narrow (0, t.n_real, 200 - t.n_real).abs ().sum ().item<int64_t> (), 0);
    // Cut at max_len like the pi0 format.
    const pi0::Tokens cut = tok.encode_pi05_prompt (task, bins, 10);
    EXPECT_TRUE (cut.truncated);
    EXPECT_EQ (cut.n_real, 10);
    n++;
  }
  EXPECT_EQ (n, 3);
  // Not vacuous: one bin's difference changes the ids.
  const auto &c0 = golden.at ("cases")[0];
  auto bins = c0.at ("bins").get<std::vector<int>> ();
  bins[0] += 1;
  const pi0::Tokens moved = tok.encode_pi05_prompt (c0.at ("task").get<std::string> (), bins, 200);
  const auto ids = c0.at ("ids").get<std::vector<int64_t>> ();
  bool differs = moved.n_real != static_cast<int> (ids.size ());
  for (int i = 0; !differs && i < moved.n_real; i++)
    differs = moved.ids[i].item<int64_t> () != ids[i];
  EXPECT_TRUE (differs);
}

TEST (TokenizerPi05, ANonFiniteStateIsRefusedNotBinned)
{
  expect_error (
      [] {
        pi0::Tokenizer::state_bins ({0.5, std::nan ("")});
      },
      {"state dim 1", "cannot be put into the prompt"});
  expect_error ([] { pi0::Tokenizer::state_bins ({-HUGE_VAL}); }, {"state dim 0"});
  // Every edge and its neighbours: the bin of x is the count of edges -1 + k/128 <= x, minus 1.
  for (int k = 0; k < 256; k++) {
    const double e = -1.0 + k / 128.0;
    EXPECT_EQ (pi0::Tokenizer::state_bins ({e})[0], k);
    EXPECT_EQ (pi0::Tokenizer::state_bins ({std::nextafter (e, -2.0)})[0], k - 1);
  }
}
