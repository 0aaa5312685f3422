/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reader: a LeRobotDataset v3 someone gave us (recorded here, by LeRobot, converted, damaged)
 * opened for playing: its schema, the episodes info.json commits, and their frames. Every check
 * gives a message; no file makes it throw or abort. */
#include "lerobot/pi0lerobot.h"

#include "common/pi0json.h"
#include "lerobot/pi0lerobotepisodes.h"
#include "lerobot/pi0lerobotinfo.h"
#include "lerobot/pi0lerobotinternal.h"
#include "lerobot/pi0lerobotparquet.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

namespace
{

class ReaderImpl : public Reader
{
public:
  fs::path root;
  Schema schema_;
  std::vector<EpisodeInfo> episodes_;
  std::vector<std::string> tasks_;
  std::string video_path_tmpl, data_path_tmpl;

  const Schema &schema () const override { return schema_; }
  const std::vector<EpisodeInfo> &episodes () const override { return episodes_; }
  const std::vector<std::string> &tasks () const override { return tasks_; }

  std::string video_path (const EpisodeInfo &ep, size_t cam) const override
  {
    return (root / "videos" / schema_.cameras[cam].key /
            (chunk_file (flat_index (ep.videos[cam].chunk, ep.videos[cam].file)) + ".mp4"))
        .string ();
  }

  bool read_frames (const EpisodeInfo &ep, std::vector<float> *state, std::vector<float> *action,
                    std::vector<double> *timestamp, std::string *error,
                    std::vector<int64_t> *task_index) override
  {
    try {
      const fs::path p =
          root / "data" / (chunk_file (flat_index (ep.data_chunk, ep.data_file)) + ".parquet");
      auto t = read_parquet (p, error);
      if (!t)
        return false;
      auto ei = column (t, "episode_index", p, error), fi = column (t, "frame_index", p, error),
           ts = column (t, "timestamp", p, error), st = column (t, "observation.state", p, error),
           ac = column (t, "action", p, error);
      if (!ei || !fi || !ts || !st || !ac)
        return false;
      auto ti = task_index ? column (t, "task_index", p, error) : nullptr;
      if (task_index && !ti)
        return false;
      const size_t sd = schema_.state_names.size (), ad = schema_.action_names.size ();
      std::vector<std::pair<int64_t, int64_t>> order; /* frame_index, row */
      for (int64_t r = 0; r < t->num_rows (); r++) {
        int64_t e, f;
        if (!int64_at (ei, r, &e) || !int64_at (fi, r, &f))
          return fail (error, p.string () + ": missing episode or frame index");
        if (e == ep.index)
          order.push_back ({f, r});
      }
      std::sort (order.begin (), order.end ());
      if ((int64_t)order.size () != ep.length)
        return fail (error, p.string () + " holds " + std::to_string (order.size ()) +
                                " frames of episode " + std::to_string (ep.index) +
                                ", meta/episodes says " + std::to_string (ep.length));
      state->clear ();
      action->clear ();
      timestamp->clear ();
      if (task_index)
        task_index->clear ();
      std::vector<double> v;
      for (auto &o : order) {
        double t0;
        if (!flatten_numbers (st, o.second, &v) || v.size () != sd)
          return fail (error, p.string () + ": observation.state is not " + std::to_string (sd) +
                                  " numbers");
        state->insert (state->end (), v.begin (), v.end ());
        if (!flatten_numbers (ac, o.second, &v) || v.size () != ad)
          return fail (error, p.string () + ": action is not " + std::to_string (ad) + " numbers");
        action->insert (action->end (), v.begin (), v.end ());
        if (!double_at (ts, o.second, &t0))
          return fail (error, p.string () + ": timestamp missing");
        if (!std::isfinite (t0) || t0 < 0 || (!timestamp->empty () && !(t0 > timestamp->back ())))
          return fail (error, p.string () + ": the timestamps of episode " +
                                  std::to_string (ep.index) + " are not finite and increasing");
        timestamp->push_back (t0);
        if (task_index) {
          /* LeRobot raises on a task_index past its tasks when the frame is read. */
          int64_t k;
          if (!int64_at (ti, o.second, &k) || k < 0 || k >= (int64_t)tasks_.size ())
            return fail (error, p.string () + ": frame " + std::to_string (o.first) +
                                    " of episode " + std::to_string (ep.index) +
                                    " has task_index " +
                                    (int64_at (ti, o.second, &k) ? std::to_string (k) : "null") +
                                    ", meta/tasks.parquet has " + std::to_string (tasks_.size ()) +
                                    " tasks");
          task_index->push_back (k);
        }
      }
      return true;
    } catch (const std::bad_alloc &) {
      return fail (error, "cannot read the episode: out of memory");
    } catch (const std::exception &e) {
      return fail (error, std::string ("cannot read the episode: ") + e.what ());
    }
  }
};

} // namespace

std::unique_ptr<Reader>
Reader::open (const std::string &root_dir, std::string *error)
{
  /* Every check below gives a message; this is the last line, so that no file can abort the
   * process that reads it. */
  try {
    return open_checked (root_dir, error);
  } catch (const std::bad_alloc &) {
    fail (error, "cannot read the dataset in " + root_dir + ": out of memory");
  } catch (const std::exception &e) {
    fail (error, "cannot read the dataset in " + root_dir + ": " + e.what ());
  }
  return nullptr;
}

std::unique_ptr<Reader>
Reader::open_checked (const std::string &root_dir, std::string *error)
{
  auto r = std::make_unique<ReaderImpl> ();
  r->root = root_dir;
  std::string err;
  auto info = pi0::json::load_strict ((r->root / "meta" / "info.json").string (), &err);
  if (!info) {
    fail (error, err);
    return nullptr;
  }
  auto text = [&] (const char *key) {
    return info->is_object () && info->contains (key) && (*info)[key].is_string ()
               ? (*info)[key].get<std::string> ()
               : std::string ();
  };
  if (text ("codebase_version") != "v3.0") {
    fail (error, root_dir + " is not a LeRobotDataset v3.0");
    return nullptr;
  }
  if (!parse_features (*info, &r->schema_, error))
    return nullptr;
  const std::string dp = text ("data_path");
  const std::string vp = text ("video_path");
  if (dp != "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet" ||
      vp != "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4") {
    fail (error, root_dir + ": unsupported data_path or video_path template");
    return nullptr;
  }
  std::vector<Row> rows;
  if (!read_episode_rows (r->root, r->schema_, &rows, error))
    return nullptr;
  int64_t committed = 0;
  if (!committed_episodes (*info, rows, &committed, error))
    return nullptr;
  for (auto &row : rows)
    if (row.info.index < committed)
      r->episodes_.push_back (row.info);
  std::sort (r->episodes_.begin (), r->episodes_.end (),
             [] (const EpisodeInfo &a, const EpisodeInfo &b) { return a.index < b.index; });
  if (!read_tasks (r->root, &r->tasks_, error, !r->episodes_.empty ()))
    return nullptr;
  return r;
}

} // namespace pi0::lerobot
