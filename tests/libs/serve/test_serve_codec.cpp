/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The policy server's pure parts (serve/pi0mapping, serve/pi0codec): mappings and their
 * presets, observations as openpi-client packs them (written here with msgpack-c++'s packer,
 * byte for byte what msgpack_numpy writes), and every malformed or hostile input the decoder
 * must refuse with a clear message. The Python client itself is exercised in test_serve_server. */

#include "serve/pi0codec.h"
#include "common/pi0json.h"
#include "serve/pi0mapping.h"
#include "tests/pi0testenv.h"

#include <glib.h>

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace pi0::serve;

namespace
{

using Packer = msgpack::packer<msgpack::sbuffer>;

void
str (Packer &p, const std::string &s)
{
  p.pack_str ((uint32_t)s.size ());
  p.pack_str_body (s.data (), (uint32_t)s.size ());
}

void
bin (Packer &p, const std::string &s)
{
  p.pack_bin ((uint32_t)s.size ());
  p.pack_bin_body (s.data (), (uint32_t)s.size ());
}

/* msgpack_numpy.pack_array's map: bytes keys, the dtype string, the shape list. */
void
ndarray (Packer &p, const std::string &dtype, const std::vector<uint64_t> &shape, const void *data,
         size_t nbytes)
{
  p.pack_map (4);
  bin (p, "__ndarray__");
  p.pack_true ();
  bin (p, "data");
  p.pack_bin ((uint32_t)nbytes);
  p.pack_bin_body (static_cast<const char *> (data), (uint32_t)nbytes);
  bin (p, "dtype");
  str (p, dtype);
  bin (p, "shape");
  p.pack_array ((uint32_t)shape.size ());
  for (auto d : shape)
    p.pack_uint64 (d);
}

std::vector<uint8_t>
pixels (int h, int w, int seed)
{
  std::vector<uint8_t> px ((size_t)h * w * 3);
  for (size_t i = 0; i < px.size (); i++)
    px[i] = (uint8_t)((i * 31 + seed * 7) & 0xff);
  return px;
}

/* An ALOHA observation as openpi's example sends it: CHW images under "images", a float64 state
 * of 14, a prompt. @edit may change the state before it is packed. */
std::string
aloha (const std::vector<double> &state, bool with_wrists = true, const char *prompt = "do it")
{
  msgpack::sbuffer buf;
  Packer p (buf);
  p.pack_map (3);
  str (p, "images");
  p.pack_map (with_wrists ? 4 : 2);
  auto img = [&] (const char *k, int h, int w, int seed) {
    str (p, k);
    auto px = pixels (h, w, seed);
    ndarray (p, "|u1", {3, (uint64_t)h, (uint64_t)w}, px.data (), px.size ());
  };
  img ("cam_high", 24, 40, 1);
  img ("cam_low", 24, 40, 2);
  if (with_wrists) {
    img ("cam_left_wrist", 10, 12, 3);
    img ("cam_right_wrist", 7, 9, 4);
  }
  str (p, "state");
  ndarray (p, "<f8", {state.size ()}, state.data (), state.size () * 8);
  str (p, "prompt");
  str (p, prompt);
  return std::string (buf.data (), buf.size ());
}

std::vector<double>
state14 ()
{
  std::vector<double> s (14);
  for (int i = 0; i < 14; i++)
    s[i] = 0.1 * i - 0.5;
  return s;
}

Mapping
preset (const char *name)
{
  std::string err;
  auto m = load_mapping (name, &err);
  EXPECT_TRUE (m) << err;
  return m ? *m : Mapping ();
}

bool
decode (const std::string &msg, const Mapping &m, Observation *obs, std::string *err,
        DecodeLimits lim = DecodeLimits ())
{
  return decode_observation (reinterpret_cast<const uint8_t *> (msg.data ()), msg.size (), m, lim,
                             obs, err);
}

std::string
error_of (const std::string &msg, const Mapping &m, DecodeLimits lim = DecodeLimits ())
{
  Observation obs;
  std::string err;
  EXPECT_FALSE (decode (msg, m, &obs, &err, lim)) << "accepted";
  EXPECT_FALSE (err.empty ());
  EXPECT_TRUE (obs.state.empty ()) << "a refused observation keeps nothing";
  return err;
}

} // namespace

TEST (Mapping, PresetsParseAndMatchOpenpisExamples)
{
  for (const auto &n : mapping_presets ())
    preset (n.c_str ());
  Mapping a = preset ("aloha");
  EXPECT_EQ (a.views[0], (KeyPath{"images", "cam_high"}));
  EXPECT_EQ (a.views[1], (KeyPath{"images", "cam_left_wrist"}));
  EXPECT_EQ (a.views[2], (KeyPath{"images", "cam_right_wrist"}));
  EXPECT_TRUE (a.optional[1] && a.optional[2] && !a.optional[0]);
  EXPECT_EQ (a.state_dim, 14);
  EXPECT_EQ (a.action_dim, 14);
  Mapping d = preset ("droid");
  EXPECT_EQ (d.state.size (), 2u);
  EXPECT_EQ (d.state[1], (KeyPath{"observation/gripper_position"}));
  EXPECT_TRUE (d.views[2].empty ());
  EXPECT_EQ (d.action_dim, 8);
  Mapping l = preset ("libero");
  EXPECT_EQ (l.views[0], (KeyPath{"observation/image"}));
  EXPECT_EQ (l.action_dim, 7);
}

/* Each preset carries the robot transforms and the default prompt of the openpi config it is
 * for, as tests/parity/make_openpi_transforms_golden.py read them from openpi's
 * training/config.py (the "configs" of the committed golden). */
TEST (Mapping, PresetsCarryOpenpisTransformsAndDefaultPrompts)
{
  std::string err;
  auto golden = pi0::json::load_strict (
      pi0test::source_root () + "/tests/parity/openpi_transforms/golden.json", &err);
  ASSERT_TRUE (golden) << err;
  int checked = 0;
  for (const auto &c : (*golden)["configs"]) {
    const std::string config = c["name"].get<std::string> ();
    SCOPED_TRACE (config);
    /* pi0_aloha_towel: the preset aloha_towel; pi05_droid: the preset pi05_droid. */
    const bool pi05 = config.rfind ("pi05_", 0) == 0;
    ASSERT_TRUE (pi05 || config.rfind ("pi0_", 0) == 0);
    Mapping m = preset (pi05 ? config.c_str () : config.substr (4).c_str ());
    EXPECT_EQ (m.transforms, c["transforms"].get<std::string> ());
    /* openpi normalizes with quantiles for every model type but pi0. */
    EXPECT_EQ (m.norm_mode, c["norm"] == "quantile" ? "quantile" : "");
    EXPECT_EQ (m.default_prompt,
               c["default_prompt"].is_null () ? "" : c["default_prompt"].get<std::string> ());
    /* The pi0.5 presets say openpi's discrete_state_input, which openpi's converter leaves out
     * of the checkpoint (pi05_libero's model reads no state). */
    if (pi05) {
      ASSERT_TRUE (m.discrete_state_input.has_value ());
      EXPECT_EQ (*m.discrete_state_input, c["discrete_state_input"].get<bool> ());
    } else {
      EXPECT_FALSE (m.discrete_state_input.has_value ());
    }
    checked++;
  }
  EXPECT_EQ (checked, 9);
  std::vector<std::string> names = mapping_presets ();
  EXPECT_EQ (names.size (), 9u) << "a preset without its openpi config in the goldens";
}

TEST (Mapping, BadMappingsAreRefusedWithTheReason)
{
  struct Case {
    const char *json, *expect;
  } cases[] = {
      {R"({"views": {"main": "a"}, "state": ["s"]})", "state_dim"},
      {R"({"views": {"front": "a"}, "state": ["s"], "state_dim": 2})", "unknown view"},
      {R"({"views": {"side": "a"}, "state": ["s"], "state_dim": 2})", "\"main\""},
      {R"({"views": {"main": "a"}, "state": ["a"], "state_dim": 2})", "used twice"},
      {R"({"views": {"main": ["o", "img"]}, "state": ["o"], "state_dim": 2})", "holds"},
      {R"({"views": {"main": "a"}, "state": [], "state_dim": 2})", "non-empty"},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 0})", "state_dim"},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 2, "colour": 1})", "unknown field"},
      {R"({"views": {"main": ""}, "state": ["s"], "state_dim": 2})", "empty key"},
      {R"({"views": {"main": "a"}, "optional_views": ["main"], "state": ["s"], "state_dim": 2})",
       "always required"},
      {R"({"views": {"main": "a", "main": "b"}, "state": ["s"], "state_dim": 2})",
       "more than once"},
      {R"([1, 2])", "JSON object"},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 2, "transforms": "bridge"})",
       "\"transforms\" must be one of none, aloha"},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 2, "default_prompt": ""})",
       "default_prompt"},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 2, "norm_mode": "minmax"})",
       "\"norm_mode\" must be \"zscore\" or \"quantile\""},
      {R"({"views": {"main": "a"}, "state": ["s"], "state_dim": 2, "discrete_state_input": 0})",
       "\"discrete_state_input\" must be true or false"},
  };
  for (const auto &c : cases) {
    std::string err;
    EXPECT_FALSE (parse_mapping (c.json, "m.json", &err)) << c.json;
    EXPECT_NE (err.find (c.expect), std::string::npos) << c.json << " -> " << err;
  }
  std::string err;
  EXPECT_FALSE (load_mapping ("alohaa", &err));
  EXPECT_NE (err.find ("aloha, droid, libero"), std::string::npos) << err;
  EXPECT_FALSE (load_mapping ("/nonexistent/m.json", &err));
  EXPECT_NE (err.find ("/nonexistent/m.json"), std::string::npos) << err;
}

TEST (Codec, AlohaObservationDecodesAsOpenpiSendsIt)
{
  Mapping m = preset ("aloha");
  Observation obs;
  std::string err;
  const std::string msg = aloha (state14 ());
  ASSERT_TRUE (decode (msg, m, &obs, &err)) << err;
  ASSERT_TRUE (obs.views[0].present);
  EXPECT_TRUE (obs.views[0].chw);
  EXPECT_EQ (obs.views[0].width, 40);
  EXPECT_EQ (obs.views[0].height, 24);
  EXPECT_EQ (obs.views[1].width, 12);
  EXPECT_EQ (obs.views[2].height, 7);
  /* The pixels are the message's bytes, not a copy. */
  auto px = pixels (24, 40, 1);
  EXPECT_GE (obs.views[0].data, reinterpret_cast<const uint8_t *> (msg.data ()));
  EXPECT_LT (obs.views[0].data, reinterpret_cast<const uint8_t *> (msg.data ()) + msg.size ());
  EXPECT_EQ (memcmp (obs.views[0].data, px.data (), px.size ()), 0);
  ASSERT_EQ (obs.state.size (), 14u);
  for (int i = 0; i < 14; i++)
    EXPECT_EQ (obs.state[i], (float)(0.1 * i - 0.5));
  ASSERT_TRUE (obs.prompt);
  EXPECT_EQ (*obs.prompt, "do it");
  EXPECT_FALSE (obs.seed);

  /* ALOHA's wrist cameras may be missing: masked, as openpi does. */
  ASSERT_TRUE (decode (aloha (state14 (), false), m, &obs, &err)) << err;
  EXPECT_TRUE (obs.views[0].present);
  EXPECT_FALSE (obs.views[1].present);
  EXPECT_FALSE (obs.views[2].present);
}

TEST (Codec, DroidStateIsConcatenatedAndHwcImagesRead)
{
  Mapping m = preset ("droid");
  msgpack::sbuffer buf;
  Packer p (buf);
  p.pack_map (5);
  auto px = pixels (5, 7, 0);
  str (p, "observation/exterior_image_1_left");
  ndarray (p, "|u1", {5, 7, 3}, px.data (), px.size ());
  str (p, "observation/wrist_image_left");
  ndarray (p, "|u1", {5, 7, 3}, px.data (), px.size ());
  const float joints[7] = {1, 2, 3, 4, 5, 6, 7};
  str (p, "observation/joint_position");
  ndarray (p, "<f4", {7}, joints, sizeof joints);
  /* The gripper as a numpy scalar (msgpack_numpy's __npgeneric__). */
  str (p, "observation/gripper_position");
  p.pack_map (3);
  bin (p, "__npgeneric__");
  p.pack_true ();
  bin (p, "data");
  p.pack_double (0.25);
  bin (p, "dtype");
  str (p, "<f8");
  str (p, "prompt");
  str (p, "fold");
  Observation obs;
  std::string err;
  ASSERT_TRUE (decode (std::string (buf.data (), buf.size ()), m, &obs, &err)) << err;
  EXPECT_FALSE (obs.views[0].chw);
  EXPECT_EQ (obs.views[0].width, 7);
  EXPECT_EQ (obs.views[0].height, 5);
  EXPECT_FALSE (obs.views[2].present);
  EXPECT_EQ (obs.state, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 0.25f}));
}

TEST (Codec, EveryWhitelistedDtypeIsReadExactly)
{
  /* A custom mapping whose state is one part of 4 values of each dtype in turn. */
  std::string err;
  auto m = parse_mapping (R"({"views": {"main": "img"}, "state": ["s"], "state_dim": 4,
                             "prompt": "p", "seed": "seed"})",
                          "t", &err);
  ASSERT_TRUE (m) << err;
  auto with_state = [&] (const std::string &dtype, const void *data, size_t nbytes) {
    msgpack::sbuffer buf;
    Packer p (buf);
    p.pack_map (2);
    auto px = pixels (2, 2, 0);
    str (p, "img");
    ndarray (p, "|u1", {2, 2, 3}, px.data (), px.size ());
    str (p, "s");
    ndarray (p, dtype, {4}, data, nbytes);
    return std::string (buf.data (), buf.size ());
  };
  Observation obs;
  const int8_t i1[4] = {-128, -1, 0, 127};
  ASSERT_TRUE (decode (with_state ("|i1", i1, 4), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{-128, -1, 0, 127}));
  const int16_t i2[4] = {-32768, -2, 3, 32767};
  ASSERT_TRUE (decode (with_state ("<i2", i2, 8), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{-32768, -2, 3, 32767}));
  const uint16_t u2[4] = {0, 1, 2, 65535};
  ASSERT_TRUE (decode (with_state ("<u2", u2, 8), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{0, 1, 2, 65535}));
  const int32_t i4[4] = {-5, 6, -7, 8};
  ASSERT_TRUE (decode (with_state ("<i4", i4, 16), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{-5, 6, -7, 8}));
  const int64_t i8[4] = {-1, 1, -1000000, 1000000};
  ASSERT_TRUE (decode (with_state ("<i8", i8, 32), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{-1, 1, -1000000, 1000000}));
  const uint8_t b1[4] = {0, 1, 1, 0};
  ASSERT_TRUE (decode (with_state ("|b1", b1, 4), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{0, 1, 1, 0}));
  /* float16: 1.0, -2.0, 0.5, 65504 (the largest half). */
  const uint16_t f2[4] = {0x3c00, 0xc000, 0x3800, 0x7bff};
  ASSERT_TRUE (decode (with_state ("<f2", f2, 8), *m, &obs, &err)) << err;
  EXPECT_EQ (obs.state, (std::vector<float>{1, -2, 0.5f, 65504}));
  /* A half infinity is refused like any other. */
  const uint16_t f2inf[4] = {0x3c00, 0x7c00, 0, 0};
  Observation o2;
  EXPECT_FALSE (decode (with_state ("<f2", f2inf, 8), *m, &o2, &err));
  EXPECT_NE (err.find ("infinite"), std::string::npos) << err;

  /* Refused dtypes, by name in the message. */
  for (const char *dt : {"|O", ">f4", "<c8", "<U4", "|V4", "<M8[s]", "|S4", "float32"}) {
    const float f[4] = {};
    std::string e = error_of (with_state (dt, f, 16), *m);
    EXPECT_NE (e.find ("dtype"), std::string::npos) << dt << ": " << e;
  }
}

TEST (Codec, NonFiniteOrOutOfRangeStateIsRefused)
{
  Mapping m = preset ("aloha");
  for (double bad : {std::nan (""), (double)INFINITY, -(double)INFINITY, 1e39, -4e38}) {
    auto s = state14 ();
    s[5] = bad;
    std::string e = error_of (aloha (s), m);
    EXPECT_NE (e.find ("'state'[5]"), std::string::npos) << e;
    EXPECT_NE (e.find (std::isnan (bad)   ? "NaN"
                       : std::isinf (bad) ? "infinite"
                                          : "range"),
               std::string::npos)
        << e;
  }
}

TEST (Codec, WrongKeysShapesAndSizesAreRefusedNamingTheKey)
{
  Mapping m = preset ("aloha");
  struct Case {
    std::function<void (Packer &)> write;
    int n_keys;
    const char *expect;
  };
  auto images_ok = [] (Packer &p) {
    str (p, "images");
    p.pack_map (1);
    str (p, "cam_high");
    auto px = pixels (4, 4, 0);
    ndarray (p, "|u1", {4, 4, 3}, px.data (), px.size ());
  };
  auto state_ok = [] (Packer &p) {
    str (p, "state");
    auto s = state14 ();
    ndarray (p, "<f8", {14}, s.data (), 14 * 8);
  };
  std::vector<Case> cases = {
      /* unknown key at the top and inside a map the mapping reads */
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         str (p, "extra");
         p.pack_int (1);
       },
       3, "unknown key 'extra'"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (2);
         str (p, "cam_high");
         auto px = pixels (4, 4, 0);
         ndarray (p, "|u1", {4, 4, 3}, px.data (), px.size ());
         str (p, "cam_top");
         ndarray (p, "|u1", {4, 4, 3}, px.data (), px.size ());
         state_ok (p);
       },
       2, "unknown key 'images[cam_top]'"},
      /* the base camera missing */
      {[&] (Packer &p) { state_ok (p); }, 1, "no 'images[cam_high]'"},
      /* the state missing, of the wrong size, 2-D, not numbers */
      {[&] (Packer &p) { images_ok (p); }, 1, "no 'state'"},
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         double s[3] = {1, 2, 3};
         ndarray (p, "<f8", {3}, s, sizeof s);
       },
       2, "expects 14"},
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         auto s = state14 ();
         ndarray (p, "<f8", {2, 7}, s.data (), 14 * 8);
       },
       2, "1-D"},
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         str (p, "fourteen");
       },
       2, "must be numbers"},
      /* data that does not match the shape */
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         auto s = state14 ();
         ndarray (p, "<f8", {14}, s.data (), 13 * 8);
       },
       2, "bytes of data for 14 values"},
      /* images: float outside [0, 1], float16, 2-D, 4 channels, empty, a list */
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         float f[12] = {0, 0.5f, 1.5f};
         ndarray (p, "<f4", {2, 2, 3}, f, sizeof f);
         state_ok (p);
       },
       2, "in [0, 1]"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         uint16_t f[12] = {};
         ndarray (p, "<f2", {2, 2, 3}, f, sizeof f);
         state_ok (p);
       },
       2, "uint8 [H,W,3] or [3,H,W] (or float32/float64 in [0, 1])"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         auto px = pixels (4, 4, 0);
         ndarray (p, "|u1", {4, 12}, px.data (), 48);
         state_ok (p);
       },
       2, "uint8 [H,W,3] or [3,H,W]"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         uint8_t px[64] = {};
         ndarray (p, "|u1", {4, 4, 4}, px, 64);
         state_ok (p);
       },
       2, "uint8 [H,W,3] or [3,H,W]"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         ndarray (p, "|u1", {0, 4, 3}, nullptr, 0);
         state_ok (p);
       },
       2, "outside 1x1"},
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_map (1);
         str (p, "cam_high");
         p.pack_array (1);
         p.pack_int (3);
         state_ok (p);
       },
       2, "numpy uint8 array"},
      /* "images" not a map */
      {[&] (Packer &p) {
         str (p, "images");
         p.pack_int (4);
         state_ok (p);
       },
       2, "'images' must be a map"},
      /* a key twice */
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         state_ok (p);
       },
       3, "given twice"},
      /* a non-string key */
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         p.pack_int (7);
         p.pack_int (7);
       },
       3, "keys must be strings"},
      /* prompt: not a string, invalid UTF-8, with a NUL */
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         str (p, "prompt");
         p.pack_int (5);
       },
       3, "must be a string"},
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         str (p, "prompt");
         str (p, "caf\xc3");
       },
       3, "UTF-8"},
      {[&] (Packer &p) {
         images_ok (p);
         state_ok (p);
         str (p, "prompt");
         str (p, std::string ("a\0b", 3));
       },
       3, "a NUL character"},
      /* a malformed ndarray: missing the shape, an extra key, a negative size */
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         p.pack_map (3);
         bin (p, "__ndarray__");
         p.pack_true ();
         bin (p, "data");
         bin (p, std::string (8, '\0'));
         bin (p, "dtype");
         str (p, "<f8");
       },
       2, "malformed numpy array"},
      {[&] (Packer &p) {
         images_ok (p);
         str (p, "state");
         p.pack_map (4);
         bin (p, "__ndarray__");
         p.pack_true ();
         bin (p, "data");
         bin (p, std::string (8, '\0'));
         bin (p, "dtype");
         str (p, "<f8");
         bin (p, "shape");
         p.pack_array (1);
         p.pack_int (-1);
       },
       2, "negative size"},
  };
  for (size_t i = 0; i < cases.size (); i++) {
    msgpack::sbuffer buf;
    Packer p (buf);
    p.pack_map ((uint32_t)cases[i].n_keys);
    cases[i].write (p);
    std::string e = error_of (std::string (buf.data (), buf.size ()), m);
    EXPECT_NE (e.find (cases[i].expect), std::string::npos) << "case " << i << ": " << e;
  }
}

TEST (Codec, MalformedAndHostileMsgpackIsRefusedBeforeAnythingIsBuilt)
{
  Mapping m = preset ("aloha");
  const std::string good = aloha (state14 ());
  /* Every truncation of a good message, and trailing bytes after one. */
  for (size_t n = 0; n < good.size (); n += 7)
    error_of (good.substr (0, n), m);
  EXPECT_NE (error_of (good + "x", m).find ("after the observation"), std::string::npos);
  /* Not a map at the top. */
  EXPECT_NE (error_of (std::string ("\x93\x01\x02\x03", 4), m).find ("msgpack map"),
             std::string::npos);
  /* A reserved byte. */
  EXPECT_NE (error_of (std::string ("\xc1", 1), m).find ("malformed"), std::string::npos);
  /* A header announcing a 4 GB binary in a few bytes: refused by the limits, not allocated. */
  EXPECT_FALSE (error_of (std::string ("\x81\xa1k\xc6\xff\xff\xff\xf0", 8), m).empty ());
  /* A million-element array announced (and present as nils), deep nesting, an ext type. */
  {
    msgpack::sbuffer buf;
    Packer p (buf);
    p.pack_map (1);
    str (p, "state");
    p.pack_array (100000);
    for (int i = 0; i < 100000; i++)
      p.pack_nil ();
    EXPECT_NE (error_of (std::string (buf.data (), buf.size ()), m).find ("limits"),
               std::string::npos);
  }
  {
    msgpack::sbuffer buf;
    Packer p (buf);
    for (int i = 0; i < 40; i++) {
      p.pack_map (1);
      str (p, "images");
    }
    p.pack_nil ();
    EXPECT_NE (error_of (std::string (buf.data (), buf.size ()), m).find ("limits"),
               std::string::npos);
  }
  {
    msgpack::sbuffer buf;
    Packer p (buf);
    p.pack_map (1);
    str (p, "state");
    p.pack_ext (4, 1);
    p.pack_ext_body ("abcd", 4);
    error_of (std::string (buf.data (), buf.size ()), m);
  }
  /* Over the decoder's own size limit. */
  DecodeLimits lim;
  lim.max_message = 100;
  EXPECT_NE (error_of (good, m, lim).find ("at most 100"), std::string::npos);
  /* An image side beyond the limit. */
  lim = DecodeLimits ();
  lim.max_image_side = 30;
  EXPECT_NE (error_of (good, m, lim).find ("outside"), std::string::npos);
}

TEST (Codec, SeedIsReadWhenTheMappingNamesIt)
{
  std::string err;
  auto m = parse_mapping (
      R"({"views": {"main": "img"}, "state": ["s"], "state_dim": 1, "seed": "seed"})", "t", &err);
  ASSERT_TRUE (m) << err;
  auto msg = [&] (std::function<void (Packer &)> seed) {
    msgpack::sbuffer buf;
    Packer p (buf);
    p.pack_map (3);
    auto px = pixels (1, 1, 0);
    str (p, "img");
    ndarray (p, "|u1", {1, 1, 3}, px.data (), 3);
    str (p, "s");
    p.pack_double (0.5);
    str (p, "seed");
    seed (p);
    return std::string (buf.data (), buf.size ());
  };
  Observation obs;
  ASSERT_TRUE (decode (msg ([] (Packer &p) { p.pack_uint64 (12345678901234ull); }), *m, &obs, &err))
      << err;
  ASSERT_TRUE (obs.seed);
  EXPECT_EQ (*obs.seed, 12345678901234ull);
  EXPECT_EQ (obs.state, (std::vector<float>{0.5f}));
  EXPECT_NE (error_of (msg ([] (Packer &p) { p.pack_int (-3); }), *m).find ("non-negative"),
             std::string::npos);
  EXPECT_NE (error_of (msg ([] (Packer &p) { p.pack_double (1.5); }), *m).find ("non-negative"),
             std::string::npos);
}

TEST (Codec, ActionsAndMetadataAreWhatMsgpackNumpyReads)
{
  std::vector<float> a (50 * 32);
  for (size_t i = 0; i < a.size (); i++)
    a[i] = (float)i * 0.25f - 3.f;
  Timing t;
  t.server_infer_ms = 12.5;
  t.prev_total_ms = 40;
  t.policy_infer_ms = 9;
  /* 14 of 32 columns: each row's first 14. */
  const std::string bytes = encode_actions (a.data (), 50, 14, 32, t);
  int h = 0, d = 0;
  std::vector<float> back;
  Timing tb;
  std::string err;
  ASSERT_TRUE (decode_actions (reinterpret_cast<const uint8_t *> (bytes.data ()), bytes.size (), &h,
                               &d, &back, &tb, &err))
      << err;
  ASSERT_EQ (h, 50);
  ASSERT_EQ (d, 14);
  for (int r = 0; r < 50; r++)
    for (int c = 0; c < 14; c++)
      ASSERT_EQ (back[r * 14 + c], a[r * 32 + c]);
  EXPECT_EQ (tb.server_infer_ms, 12.5);
  EXPECT_EQ (tb.prev_total_ms, 40);
  EXPECT_EQ (tb.policy_infer_ms, 9);
  /* Timings are floats on the wire even when integral (40 ms, 9 ms), as openpi's server sends
   * them. */
  {
    msgpack::object_handle th = msgpack::unpack (bytes.data (), bytes.size ());
    int floats = 0;
    for (uint32_t i = 0; i < th.get ().via.map.size; i++) {
      const msgpack::object &key = th.get ().via.map.ptr[i].key;
      const msgpack::object &kv = th.get ().via.map.ptr[i].val;
      if (key.type != msgpack::type::STR ||
          (key.as<std::string> () != "policy_timing" && key.as<std::string> () != "server_timing"))
        continue;
      for (uint32_t j = 0; j < kv.via.map.size; j++) {
        EXPECT_EQ (kv.via.map.ptr[j].val.type, msgpack::type::FLOAT64);
        floats++;
      }
    }
    EXPECT_EQ (floats, 3);
  }

  /* The ndarray's keys are msgpack bin (msgpack_numpy looks them up as bytes). */
  msgpack::object_handle oh = msgpack::unpack (bytes.data (), bytes.size ());
  const msgpack::object &root = oh.get ();
  ASSERT_EQ (root.type, msgpack::type::MAP);
  const msgpack::object &actions = root.via.map.ptr[0].val;
  ASSERT_EQ (actions.type, msgpack::type::MAP);
  for (uint32_t i = 0; i < actions.via.map.size; i++)
    EXPECT_EQ (actions.via.map.ptr[i].key.type, msgpack::type::BIN);

  std::string meta;
  ASSERT_TRUE (
      encode_metadata (R"({"reset_pose": [0, 1.5, -2], "robot": "aloha", "n": null})", &meta, &err))
      << err;
  oh = msgpack::unpack (meta.data (), meta.size ());
  ASSERT_EQ (oh.get ().type, msgpack::type::MAP);
  EXPECT_EQ (oh.get ().via.map.size, 3u);
  /* The metadata goes out as the file has it: its keys in its order (not sorted), a float that
   * happens to be integral still a float (msgpack-c would pack 2.0 as the integer 2). */
  ASSERT_TRUE (encode_metadata (R"({"zeta": 2.0, "alpha": 3, "mid": [1.0, 1]})", &meta, &err))
      << err;
  oh = msgpack::unpack (meta.data (), meta.size ());
  const msgpack::object_map &mm = oh.get ().via.map;
  ASSERT_EQ (mm.size, 3u);
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < mm.size; i++)
    keys.push_back (mm.ptr[i].key.as<std::string> ());
  EXPECT_EQ (keys, (std::vector<std::string>{"zeta", "alpha", "mid"}));
  EXPECT_EQ (mm.ptr[0].val.type, msgpack::type::FLOAT64);
  EXPECT_EQ (mm.ptr[0].val.via.f64, 2.0);
  EXPECT_EQ (mm.ptr[1].val.type, msgpack::type::POSITIVE_INTEGER);
  ASSERT_EQ (mm.ptr[2].val.type, msgpack::type::ARRAY);
  EXPECT_EQ (mm.ptr[2].val.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ (mm.ptr[2].val.via.array.ptr[1].type, msgpack::type::POSITIVE_INTEGER);
  EXPECT_FALSE (encode_metadata ("[1]", &meta, &err));
  EXPECT_FALSE (encode_metadata (R"({"a": 1, "a": 2})", &meta, &err));
  EXPECT_NE (err.find ("more than once"), std::string::npos) << err;
}
