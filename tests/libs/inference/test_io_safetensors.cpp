// safetensors: round trips, interop with the Python `safetensors` package, and every kind of
// bad file giving a pi0::Error that names the problem (never a crash).
#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "tests/pi0testio.h"

using pi0test::expect_error;
using pi0test::TempDir;

namespace
{

// A file from raw parts: the 8-byte length (n, or the header's real size), header, data.
std::string
raw_file (const std::string &header, const std::string &data, int64_t n = -1)
{
  uint64_t len = n < 0 ? header.size () : static_cast<uint64_t> (n);
  std::string out (8, '\0');
  std::memcpy (out.data (), &len, 8);
  return out + header + data;
}

// The tensors io_oracle.py's st-write makes: arange(numel) * 0.5 - 7 cast, or arange % 3 == 0.
torch::Tensor
oracle_tensor (torch::ScalarType dtype, std::vector<int64_t> shape)
{
  int64_t n = 1;
  for (auto d : shape)
    n *= d;
  if (dtype == torch::kBool)
    return (torch::arange (n) % 3 == 0).reshape (shape);
  return (torch::arange (n, torch::kFloat64) * 0.5 - 7).to (dtype).reshape (shape);
}

const std::vector<std::tuple<std::string, torch::ScalarType, std::vector<int64_t>>> kOracleTensors =
    {
        {"a.f32", torch::kFloat32, {3, 4}},   {"b.bf16", torch::kBFloat16, {2, 3, 5}},
        {"c.f16", torch::kFloat16, {7}},      {"d.i64", torch::kInt64, {2, 2}},
        {"e.i32", torch::kInt32, {5}},        {"f.u8", torch::kUInt8, {4}},
        {"g.bool", torch::kBool, {6}},        {"h.scalar", torch::kFloat32, {}},
        {"i.empty", torch::kFloat32, {0, 3}}, {"j.f64", torch::kFloat64, {3}},
};

void
expect_same (const pi0::TensorMap &a, const pi0::TensorMap &b)
{
  ASSERT_EQ (a.size (), b.size ());
  for (const auto &[name, t] : a) {
    ASSERT_TRUE (b.count (name)) << name;
    const auto &u = b.at (name);
    EXPECT_EQ (t.scalar_type (), u.scalar_type ()) << name;
    EXPECT_EQ (t.sizes (), u.sizes ()) << name;
    EXPECT_TRUE (torch::equal (t.contiguous (), u.contiguous ())) << name;
  }
}

pi0::TensorMap
sample_tensors ()
{
  torch::manual_seed (7);
  return {
      {"w.f32", torch::randn ({5, 3})},
      {"w.bf16", torch::randn ({4, 6}).to (torch::kBFloat16)},
      {"w.f16", torch::randn ({9}).to (torch::kFloat16)},
      {"idx.i64", torch::randint (-1000, 1000, {3, 2}, torch::kInt64)},
      {"flag.bool", torch::rand ({5}) > 0.5},
      {"scalar", torch::tensor (3.5f)},
  };
}

} // namespace

TEST (Safetensors, RoundTripFp32Bf16Fp16AndOthers)
{
  TempDir dir;
  const auto path = dir.file ("m.safetensors");
  const auto tensors = sample_tensors ();
  pi0::save_safetensors (path, tensors, {{"format", "pt"}, {"note", "ünïcode ok"}});
  const auto loaded = pi0::load_safetensors (path);
  expect_same (tensors, loaded);
  for (const auto &[name, t] : loaded) {
    EXPECT_TRUE (t.device ().is_cpu ());
    // The writer orders by element size so mmap'd data is aligned.
    EXPECT_EQ (reinterpret_cast<uintptr_t> (t.data_ptr ()) % t.element_size (), 0u) << name;
  }
  const auto meta = pi0::load_safetensors_metadata (path);
  EXPECT_EQ (meta.at ("format"), "pt");
  EXPECT_EQ (meta.at ("note"), "ünïcode ok");
  EXPECT_EQ (meta.size (), 2u);
}

TEST (Safetensors, NonContiguousAndEmptyMapsRoundTrip)
{
  TempDir dir;
  auto base = torch::arange (24, torch::kFloat32).reshape ({4, 6});
  pi0::TensorMap tensors{
      {"t", base.t ()}, {"s", base.slice (1, 1, 5, 2)}, {"empty", torch::zeros ({0, 4})}};
  pi0::save_safetensors (dir.file ("a.safetensors"), tensors);
  expect_same (tensors, pi0::load_safetensors (dir.file ("a.safetensors")));

  pi0::save_safetensors (dir.file ("none.safetensors"), {});
  EXPECT_TRUE (pi0::load_safetensors (dir.file ("none.safetensors")).empty ());
}

TEST (Safetensors, TensorsOutliveTheMapAndNeverWriteTheFile)
{
  TempDir dir;
  const auto path = dir.file ("m.safetensors");
  const auto tensors = sample_tensors ();
  pi0::save_safetensors (path, tensors);
  const std::string before = pi0test::read_bytes (path);

  torch::Tensor kept;
  {
    auto loaded = pi0::load_safetensors (path);
    kept = loaded.at ("w.f32");
  } // the map is gone; `kept` holds the mapping
  EXPECT_TRUE (torch::equal (kept, tensors.at ("w.f32")));
  kept.fill_ (42.0f); // copy-on-write mapping: no SIGSEGV, the file is untouched
  EXPECT_EQ (pi0test::read_bytes (path), before);
  EXPECT_TRUE (torch::equal (pi0::load_safetensors (path).at ("w.f32"), tensors.at ("w.f32")));
}

TEST (Safetensors, SaveReplacesAtomicallyAndFailedSaveKeepsOldFile)
{
  TempDir dir;
  const auto path = dir.file ("m.safetensors");
  pi0::save_safetensors (path, {{"a", torch::ones ({2})}});
  pi0::save_safetensors (path, {{"b", torch::zeros ({3})}});
  auto loaded = pi0::load_safetensors (path);
  ASSERT_EQ (loaded.size (), 1u);
  EXPECT_TRUE (loaded.count ("b"));

  const std::string before = pi0test::read_bytes (path);
  expect_error (
      [&] {
        pi0::save_safetensors (path, {{"c", torch::ones ({2}, torch::kComplexFloat)}});
      },
      {path, "'c'", "cannot store"});
  expect_error (
      [&] {
        pi0::save_safetensors (path, {{"__metadata__", torch::ones ({2})}});
      },
      {"reserved"});
  expect_error (
      [&] {
        pi0::save_safetensors (path, {{"u", torch::Tensor ()}});
      },
      {"'u'", "undefined"});
  EXPECT_EQ (pi0test::read_bytes (path), before);
  expect_error (
      [&] {
        pi0::save_safetensors (dir.file ("no/such/dir/x.safetensors"), {{"a", torch::ones ({1})}});
      },
      {"no/such/dir/x.safetensors", "cannot create"});
  // No temporary files left behind by any of the failures.
  int files = 0;
  for (const auto &e : std::filesystem::directory_iterator (dir.path ()))
    files += e.is_regular_file ();
  EXPECT_EQ (files, 1);
}

TEST (Safetensors, ReadsWhatPythonWrites)
{
  PI0_REQUIRE_PYTHON ();
  TempDir dir;
  const auto path = dir.file ("py.safetensors");
  std::string out;
  ASSERT_TRUE (pi0test::run_oracle ({"st-write", path}, &out)) << out;
  const auto loaded = pi0::load_safetensors (path);
  ASSERT_EQ (loaded.size (), kOracleTensors.size ());
  for (const auto &[name, dtype, shape] : kOracleTensors) {
    ASSERT_TRUE (loaded.count (name)) << name;
    const auto &t = loaded.at (name);
    EXPECT_EQ (t.scalar_type (), dtype) << name;
    EXPECT_TRUE (torch::equal (t, oracle_tensor (dtype, shape))) << name;
  }
  const auto meta = pi0::load_safetensors_metadata (path);
  EXPECT_EQ (meta.at ("writer"), "python");
  EXPECT_EQ (meta.at ("format"), "pt");
}

TEST (Safetensors, PythonReadsWhatWeWrite)
{
  PI0_REQUIRE_PYTHON ();
  TempDir dir;
  const auto path = dir.file ("cpp.safetensors");
  pi0::TensorMap tensors;
  for (const auto &[name, dtype, shape] : kOracleTensors)
    tensors[name] = oracle_tensor (dtype, shape);
  tensors["k.random_bf16"] = torch::randn ({3, 3}).to (torch::kBFloat16);
  pi0::save_safetensors (path, tensors, {{"writer", "gst-pi0"}});
  std::string out;
  ASSERT_TRUE (pi0test::run_oracle ({"st-read", path}, &out)) << out;
  const auto j = nlohmann::json::parse (out);
  EXPECT_EQ (j["metadata"]["writer"], "gst-pi0");
  ASSERT_EQ (j["tensors"].size (), tensors.size ());
  const std::map<torch::ScalarType, std::string> names = {
      {torch::kFloat32, "float32"}, {torch::kBFloat16, "bfloat16"}, {torch::kFloat16, "float16"},
      {torch::kInt64, "int64"},     {torch::kInt32, "int32"},       {torch::kUInt8, "uint8"},
      {torch::kBool, "bool"},       {torch::kFloat64, "float64"}};
  for (const auto &[name, t] : tensors) {
    SCOPED_TRACE (name);
    const auto &e = j["tensors"][name];
    EXPECT_EQ (e["dtype"], names.at (t.scalar_type ()));
    EXPECT_EQ (e["shape"].get<std::vector<int64_t>> (), t.sizes ().vec ());
    const auto flat = t.flatten ();
    ASSERT_EQ (e["values"].size (), static_cast<size_t> (flat.numel ()));
    for (int64_t i = 0; i < flat.numel (); i++) {
      if (t.is_floating_point ())
        EXPECT_EQ (e["values"][i].get<double> (), flat[i].item<double> ());
      else
        EXPECT_EQ (e["values"][i].get<int64_t> (), flat[i].item<int64_t> ());
    }
  }
}

// ---- bad files ----

struct BadFile {
  const char *what;
  std::string bytes;
  std::vector<std::string> message; // substrings of the expected error, besides the path
  bool header_ok = false;           // the header is valid, only the data is not
};

TEST (Safetensors, EveryBadFileIsAClearError)
{
  TempDir dir;
  const std::string f32x4 (16, '\0'); // data of one F32 [4] or [2, 2]
  const auto ok_entry = [] (const char *name, const char *range) {
    return std::string ("\"") + name +
           "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + range + "}";
  };
  std::string valid;
  {
    pi0::save_safetensors (dir.file ("valid.safetensors"),
                           {{"a", torch::ones ({64})}, {"b", torch::ones ({8})}});
    valid = pi0test::read_bytes (dir.file ("valid.safetensors"));
  }
  const std::vector<BadFile> cases = {
      {"empty file", "", {"too small"}},
      {"shorter than the length field", "abc", {"too small"}},
      {"truncated data",
       valid.substr (0, valid.size () - 5),
       {"past the end of the data", "truncated"}},
      {"truncated header", valid.substr (0, 20), {"runs past the end of the file"}},
      {"header length too large",
       raw_file ("{}", "", int64_t (1) << 40),
       {"larger than the format's limit"}},
      {"header length near 2^64",
       std::string (8, '\xff') + "{}",
       {"larger than the format's limit"}},
      {"header length past the file", raw_file ("{}", "", 1000), {"runs past the end of the file"}},
      {"not JSON", raw_file ("{not json}", ""), {"not valid JSON"}},
      {"not an object", raw_file ("[1, 2]  ", ""), {"does not start with '{'"}},
      {"trailing garbage", raw_file ("{} x", ""), {"not valid JSON"}},
      {"invalid UTF-8", raw_file ("{\"\xff\xfe\":{}}", ""), {"not valid JSON"}},
      {"entry not an object", raw_file ("{\"a\":5}", ""), {"'a'", "must be an object"}},
      {"missing dtype",
       raw_file ("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", std::string (4, '\0')),
       {"'a'", "missing \"dtype\""}},
      {"missing data_offsets",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", std::string (4, '\0')),
       {"missing \"data_offsets\""}},
      {"unknown dtype",
       raw_file ("{\"a\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,16]}}", f32x4),
       {"'a'", "unknown dtype \"F33\""}},
      {"unsupported dtype",
       raw_file ("{\"a\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,16]}}", f32x4),
       {"C64 is not supported"}},
      {"dtype not a string",
       raw_file ("{\"a\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,16]}}", f32x4),
       {"\"dtype\" must be a string"}},
      {"negative dim",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", f32x4),
       {"non-negative integer", "-4"}},
      {"fractional dim",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", f32x4),
       {"non-negative integer"}},
      {"shape not a list",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", f32x4),
       {"\"shape\" must be an array"}},
      {"shape/bytes mismatch",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
                 std::string (12, '\0')),
       {"'a'", "needs 16 bytes", "hold 12"}},
      {"element count overflow",
       raw_file (
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8],\"data_offsets\":[0,16]}}",
           f32x4),
       {"too large"}},
      {"offsets past the data",
       raw_file ("{" + ok_entry ("a", "[8,16]") + "}", std::string (8, '\0')),
       {"'a'", "past the end of the data"}},
      {"offsets end before begin",
       raw_file ("{" + ok_entry ("a", "[8,0]") + "}", f32x4),
       {"end before they begin"}},
      {"offsets not a pair",
       raw_file ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}",
                 std::string (8, '\0')),
       {"[begin, end]"}},
      {"offsets negative",
       raw_file ("{" + ok_entry ("a", "[-8,0]") + "}", f32x4),
       {"non-negative integer"}},
      {"overlapping tensors",
       raw_file ("{" + ok_entry ("a", "[0,8]") + "," + ok_entry ("b", "[4,12]") + "}",
                 std::string (12, '\0')),
       {"overlaps tensor 'a'"}},
      {"gap between tensors",
       raw_file ("{" + ok_entry ("a", "[0,8]") + "," + ok_entry ("b", "[12,20]") + "}",
                 std::string (20, '\0')),
       {"4 bytes before tensor 'b'", "belong to no tensor"}},
      {"trailing bytes",
       raw_file ("{" + ok_entry ("a", "[0,8]") + "}", f32x4),
       {"8 bytes after the last tensor"}},
      {"duplicate tensor name",
       raw_file ("{" + ok_entry ("a", "[0,8]") + "," + ok_entry ("a", "[8,16]") + "}", f32x4),
       {"'a' more than once"}},
      {"metadata not strings",
       raw_file ("{\"__metadata__\":{\"k\":1}}", ""),
       {"__metadata__", "'k'"}},
      {"metadata not an object", raw_file ("{\"__metadata__\":[1]}", ""), {"__metadata__"}},
      {"bool byte out of range",
       raw_file ("{\"a\":{\"dtype\":\"BOOL\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                 std::string ("\x01\x00\x07\x00", 4)),
       {"'a'", "BOOL", "byte 7"},
       true},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE (c.what);
    const auto path = dir.file ("bad.safetensors");
    pi0test::write_bytes (path, c.bytes);
    auto parts = c.message;
    parts.push_back (path);
    pi0::TensorMap got;
    expect_error ([&] { got = pi0::load_safetensors (path); }, parts);
    EXPECT_TRUE (got.empty ());
    if (!c.header_ok)
      expect_error ([&] { pi0::load_safetensors_metadata (path); }, {path});
  }
}

TEST (Safetensors, MissingFileAndDirectoryAreClearErrors)
{
  TempDir dir;
  expect_error ([&] { pi0::load_safetensors (dir.file ("nope.safetensors")); },
                {dir.file ("nope.safetensors"), "cannot open", "No such file"});
  expect_error ([&] { pi0::load_safetensors (dir.path ()); }, {"not a regular file"});
  // Issue 25: a FIFO with no writer blocked the start forever.
  ASSERT_EQ (mkfifo (dir.file ("fifo.safetensors").c_str (), 0600), 0);
  expect_error ([&] { pi0::load_safetensors (dir.file ("fifo.safetensors")); },
                {"fifo.safetensors", "not a regular file"});
}

/* Issue 25: a 60 kB header of nested arrays (the format allows 100 MB) cost 878 MB. */
TEST (Safetensors, DeeplyNestedHeaderIsRefusedWithoutGrowingMemory)
{
  TempDir dir;
  const std::string header =
      "{\"__metadata__\":{},\"a\":" + std::string (60000, '[') + std::string (60000, ']') + "}";
  std::ofstream (dir.file ("deep.safetensors"), std::ios::binary) << raw_file (header, "");
  expect_error ([&] { pi0::load_safetensors (dir.file ("deep.safetensors")); },
                {"deep.safetensors", "nested more than 64 deep"});
}

TEST (Safetensors, MisalignedDataIsCopiedNotMisread)
{
  // A valid file from another writer whose F32 data starts at an odd offset.
  TempDir dir;
  std::string data (1 + 8, '\0');
  const float v[2] = {1.5f, -2.25f};
  std::memcpy (&data[1], v, 8);
  pi0test::write_bytes (
      dir.file ("odd.safetensors"),
      raw_file ("{\"pad\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}",
                data));
  const auto t = pi0::load_safetensors (dir.file ("odd.safetensors"));
  ASSERT_EQ (t.size (), 2u);
  EXPECT_EQ (reinterpret_cast<uintptr_t> (t.at ("x").data_ptr ()) % 4, 0u);
  EXPECT_TRUE (torch::equal (t.at ("x"), torch::tensor ({1.5f, -2.25f})));
}

// Random corruption of a valid file: each load either succeeds with tensors inside the file,
// or throws pi0::Error. Anything else (another exception, a crash) fails.
TEST (Safetensors, RandomCorruptionNeverCrashes)
{
  TempDir dir;
  const auto path = dir.file ("fuzz.safetensors");
  pi0::save_safetensors (path, {{"a", torch::ones ({3, 5})},
                                {"b", torch::ones ({2}, torch::kBFloat16)},
                                {"c", torch::ones ({4}, torch::kInt64)}});
  const std::string valid = pi0test::read_bytes (path);
  uint64_t header_len;
  std::memcpy (&header_len, valid.data (), 8);
  std::mt19937 rng (1234);
  int errors = 0, loads = 0;
  for (int iter = 0; iter < 600; iter++) {
    std::string bytes = valid;
    switch (iter % 4) {
      case 0: // flip bytes inside the header
        for (int k = 0; k < 1 + iter % 3; k++)
          bytes[8 + rng () % header_len] = static_cast<char> (rng () % 256);
        break;
      case 1: // truncate anywhere
        bytes.resize (rng () % bytes.size ());
        break;
      case 2: { // a random header length
        uint64_t n = rng () % (bytes.size () + 16);
        std::memcpy (bytes.data (), &n, 8);
        break;
      }
      case 3: // replace a digit in the header by another
        for (size_t i = 8; i < 8 + header_len; i++)
          if (std::isdigit (static_cast<unsigned char> (bytes[i])) && rng () % 4 == 0)
            bytes[i] = '0' + rng () % 10;
        break;
    }
    pi0test::write_bytes (path, bytes);
    try {
      const auto t = pi0::load_safetensors (path);
      int64_t total = 0;
      for (const auto &[name, x] : t)
        total += x.nbytes ();
      EXPECT_LE (static_cast<size_t> (total), bytes.size ());
      loads++;
    } catch (const pi0::Error &) {
      errors++;
    }
  }
  EXPECT_GT (errors, 100); // the corruption did reach the validator
  RecordProperty ("loads", loads);
}
