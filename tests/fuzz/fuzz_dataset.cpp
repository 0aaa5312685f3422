/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer target for the LeRobotDataset reader (lerobot/pi0lerobotreader.cpp), what
 * pi0lerobotsrc and pi0lerobotsink append=true open. The input is a dataset's meta/info.json; the
 * rest of the dataset (its episodes and data Parquet files, two episodes, one camera) is a real
 * one written once by pi0::lerobot::Writer. Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/meson.build and run briefly as a CI test; longer by hand:
 *   build/tests/fuzz/fuzz_dataset -dict=tests/fuzz/dataset.dict -max_total_time=3600
 * Besides "no crash, no exception, no out-of-bounds read, no UB, no huge allocation": an
 * accepted dataset declares what the reader bounds (fps 1..1000, vectors up to 4096, camera
 * sides up to 16384), every episode it lists reads with its own length or is refused with a
 * message, and a refused one always says why.
 *   PI0_FUZZ_DATASET_SEED=FILE fuzz_dataset   writes the valid info.json (the seed corpus). */

#include "lerobot/pi0lerobot.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace
{

void
check (bool ok)
{
  if (!ok)
    abort ();
}

/* The dataset, made once: two episodes of 3 and 2 frames, a 2-dof state, one camera. */
const std::string &
dataset ()
{
  static std::string root;
  if (!root.empty ())
    return root;
  char tmpl[] = "/tmp/fuzz-dataset-XXXXXX";
  check (mkdtemp (tmpl) != nullptr);
  root = std::string (tmpl) + "/ds";
  pi0::lerobot::Schema s;
  s.fps = 30;
  s.state_names = {"a", "b"};
  s.action_names = {"a", "b"};
  s.cameras.push_back ({"observation.images.main", 8, 8, "h264", "yuv420p"});
  std::string err;
  auto w = pi0::lerobot::Writer::open (root, s, false, &err);
  check (w != nullptr);
  for (size_t len : {3u, 2u}) {
    pi0::lerobot::Episode ep;
    ep.length = len;
    for (size_t k = 0; k < len; k++) {
      ep.state.insert (ep.state.end (), {(float)k, 1.0f});
      ep.action.insert (ep.action.end (), {(float)k, 2.0f});
      ep.task.push_back (k ? "pick" : "place");
    }
    pi0::lerobot::Stats cs;
    cs.min = cs.max = cs.mean = cs.q01 = cs.q10 = cs.q50 = cs.q90 = cs.q99 = {0.5, 0.5, 0.5};
    cs.std = {0, 0, 0};
    cs.count = (int64_t)len;
    ep.camera_stats = {cs};
    /* The reader never opens a video: a placeholder stands for the MP4. */
    std::ofstream (w->video_part_path (0)) << "not a video";
    check (w->commit (ep, &err));
  }
  if (const char *seed = getenv ("PI0_FUZZ_DATASET_SEED"))
    fs::copy_file (root + "/meta/info.json", seed, fs::copy_options::overwrite_existing);
  return root;
}

} // namespace

extern "C" int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const std::string &root = dataset ();
  {
    std::ofstream out (root + "/meta/info.json", std::ios::binary | std::ios::trunc);
    out.write ((const char *)data, (std::streamsize)size);
  }
  std::string err;
  auto r = pi0::lerobot::Reader::open (root, &err);
  if (!r) {
    check (!err.empty ());
    return 0;
  }
  const auto &s = r->schema ();
  check (s.fps >= 1 && s.fps <= 1000);
  check (!s.state_names.empty () && s.state_names.size () <= 4096);
  check (!s.action_names.empty () && s.action_names.size () <= 4096);
  for (auto &c : s.cameras)
    check (c.width >= 1 && c.width <= 16384 && c.height >= 1 && c.height <= 16384);
  for (auto &ep : r->episodes ()) {
    check (ep.length >= 1 && ep.videos.size () == s.cameras.size ());
    std::vector<float> state, action;
    std::vector<double> ts;
    std::string e2;
    if (r->read_frames (ep, &state, &action, &ts, &e2)) {
      check (ts.size () == (size_t)ep.length);
      check (state.size () == ts.size () * s.state_names.size ());
      check (action.size () == ts.size () * s.action_names.size ());
    } else {
      check (!e2.empty ());
    }
  }
  return 0;
}
