/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A dataset's episodes read back (see pi0lerobotepisodes.h): meta/episodes' rows, checked,
 * meta/tasks.parquet, and the episodes info.json commits. */
#include "lerobot/pi0lerobotepisodes.h"

#include "lerobot/pi0lerobotinfo.h"
#include "lerobot/pi0lerobotinternal.h"
#include "lerobot/pi0lerobotparquet.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

namespace
{

/* An episode row that cannot be played as it says: negative or inconsistent indices, video
 * windows that are not finite, reversed, or too short for the episode's frames. */
bool
check_row (const Row &row, const Schema &schema, const fs::path &file, std::string *error)
{
  const EpisodeInfo &e = row.info;
  const std::string where = file.string () + ": episode " + std::to_string (e.index);
  if (e.index < 0 || e.index > kMaxCount)
    return fail (error, file.string () + ": episode_index " + std::to_string (e.index) +
                            " is out of range");
  if (e.length < 1 || e.length > kMaxCount)
    return fail (error, where + ": length " + std::to_string (e.length) + " is out of range");
  if (e.from < 0 || e.to != e.from + e.length)
    return fail (error, where + ": dataset_from_index " + std::to_string (e.from) +
                            " and dataset_to_index " + std::to_string (e.to) +
                            " do not span its length " + std::to_string (e.length));
  for (int64_t v : {e.data_chunk, e.data_file, row.meta_chunk, row.meta_file})
    if (v < 0 || v >= kChunksSize * kChunksSize)
      return fail (error, where + ": a chunk or file index is out of range");
  for (size_t c = 0; c < e.videos.size (); c++) {
    const auto &v = e.videos[c];
    const std::string key = "videos/" + schema.cameras[c].key;
    if (v.chunk < 0 || v.file < 0 || v.chunk >= kChunksSize || v.file >= kChunksSize * kChunksSize)
      return fail (error, where + ": " + key + " chunk or file index is out of range");
    if (!std::isfinite (v.from_ts) || !std::isfinite (v.to_ts) || v.from_ts < 0)
      return fail (error, where + ": " + key +
                              "/from_timestamp and to_timestamp must be finite and "
                              "not negative");
    if (v.to_ts <= v.from_ts)
      return fail (error, where + ": " + key + "/to_timestamp is not after from_timestamp");
    /* LeRobot's window is the episode's duration: it must hold the frames (a frame and a
     * half of slack for rounding). */
    if ((v.to_ts - v.from_ts) * schema.fps < (double)e.length - 1.5)
      return fail (error, where + ": " + key + " spans " + std::to_string (v.to_ts - v.from_ts) +
                              " s, too short for its " + std::to_string (e.length) + " frames at " +
                              std::to_string (schema.fps) + " fps");
  }
  return true;
}

} // namespace

bool
read_episode_rows (const fs::path &root, const Schema &schema, std::vector<Row> *rows,
                   std::string *error)
{
  const fs::path dir = root / "meta" / "episodes";
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory (dir, ec))
    for (auto &c : fs::directory_iterator (dir, ec))
      if (c.is_directory ())
        for (auto &f : fs::directory_iterator (c.path (), ec))
          if (f.path ().extension () == ".parquet")
            files.push_back (f.path ());
  std::sort (files.begin (), files.end ());
  const auto keys = feature_keys (schema);
  for (auto &file : files) {
    auto t = read_parquet (file, error);
    if (!t)
      return false;
    auto col = [&] (const std::string &n) {
      return column (t, n, file, error);
    };
    auto ep = col ("episode_index"), len = col ("length"), dc = col ("data/chunk_index"),
         df = col ("data/file_index"), from = col ("dataset_from_index"),
         to = col ("dataset_to_index"), mc = col ("meta/episodes/chunk_index"),
         mf = col ("meta/episodes/file_index"), tasks = col ("tasks");
    if (!ep || !len || !dc || !df || !from || !to || !mc || !mf || !tasks)
      return false;
    std::vector<std::shared_ptr<arrow::Array>> vc, vf, vfrom, vto;
    for (auto &c : schema.cameras) {
      vc.push_back (col ("videos/" + c.key + "/chunk_index"));
      vf.push_back (col ("videos/" + c.key + "/file_index"));
      vfrom.push_back (col ("videos/" + c.key + "/from_timestamp"));
      vto.push_back (col ("videos/" + c.key + "/to_timestamp"));
      if (!vc.back () || !vf.back () || !vfrom.back () || !vto.back ())
        return false;
    }
    for (int64_t r = 0; r < t->num_rows (); r++) {
      Row row;
      EpisodeInfo &e = row.info;
      bool ok = int64_at (ep, r, &e.index) && int64_at (len, r, &e.length) &&
                int64_at (dc, r, &e.data_chunk) && int64_at (df, r, &e.data_file) &&
                int64_at (from, r, &e.from) && int64_at (to, r, &e.to) &&
                int64_at (mc, r, &row.meta_chunk) && int64_at (mf, r, &row.meta_file);
      for (size_t c = 0; ok && c < schema.cameras.size (); c++) {
        EpisodeInfo::Video v;
        ok = int64_at (vc[c], r, &v.chunk) && int64_at (vf[c], r, &v.file) &&
             double_at (vfrom[c], r, &v.from_ts) && double_at (vto[c], r, &v.to_ts);
        e.videos.push_back (v);
      }
      if (!ok)
        return fail (error, file.string () + ": row " + std::to_string (r) +
                                " has a missing or mistyped value");
      if (!strings_at (tasks, r, &e.tasks))
        return fail (error, file.string () + ": 'tasks' of row " + std::to_string (r) +
                                " is not a list of strings");
      if (!check_row (row, schema, file, error))
        return false;
      /* Per-episode stats (absent columns leave them empty: the dataset stats are then
       * taken from stats.json as it is). */
      for (auto &k : keys) {
        Stats s;
        bool have = true;
        for (int i = 0; i < 10 && have; i++) {
          auto c = t->GetColumnByName ("stats/" + k + "/" + kStatNames[i]);
          std::vector<double> v;
          have = c && c->num_chunks () == 1 && flatten_numbers (c->chunk (0), r, &v);
          if (!have)
            break;
          if (i == 4)
            s.count = v.empty () ? 0 : (int64_t)v[0];
          else
            stat_field (s, i) = v;
        }
        row.stats.push_back (have ? s : Stats{});
      }
      rows->push_back (std::move (row));
    }
  }
  return true;
}

bool
read_tasks (const fs::path &root, std::vector<std::string> *tasks, std::string *error,
            bool required)
{
  const fs::path p = root / "meta" / "tasks.parquet";
  std::error_code ec;
  if (!fs::exists (p, ec)) {
    if (required)
      return fail (error, p.string () + " is missing: the episodes' tasks are there (LeRobot "
                                        "cannot load the dataset without it)");
    return true;
  }
  auto t = read_parquet (p, error);
  if (!t)
    return false;
  auto idx = column (t, "task_index", p, error), txt = column (t, "task", p, error);
  if (!idx || !txt)
    return false;
  tasks->assign (t->num_rows (), "");
  for (int64_t r = 0; r < t->num_rows (); r++) {
    int64_t i;
    if (!int64_at (idx, r, &i) || i != r)
      return fail (error, p.string () + ": row " + std::to_string (r) + " has task_index " +
                              (int64_at (idx, r, &i) ? std::to_string (i) : "null") +
                              "; the rows must be in task_index order 0..N-1 (LeRobot finds a "
                              "frame's task by row position)");
    if (!string_at (txt, r, &(*tasks)[i]))
      return fail (error, p.string () + ": column 'task' is not a string");
  }
  return true;
}

bool
committed_episodes (const pi0::json::Value &info, const std::vector<Row> &rows, int64_t *committed,
                    std::string *error)
{
  if (!info.contains ("total_episodes"))
    return fail (error, "info.json has no total_episodes");
  if (!whole_number (info["total_episodes"], 0, kMaxCount, "info.json: total_episodes", committed,
                     error))
    return false;
  std::set<int64_t> seen;
  int64_t frames = 0;
  for (auto &row : rows) {
    if (row.info.index >= *committed)
      continue;
    if (!seen.insert (row.info.index).second)
      return fail (error,
                   "meta/episodes has episode " + std::to_string (row.info.index) + " twice");
    frames += row.info.length;
  }
  if ((int64_t)seen.size () != *committed)
    return fail (error, "info.json: total_episodes is " + std::to_string (*committed) +
                            ", meta/episodes has " + std::to_string (seen.size ()) + " of them");
  int64_t total = 0;
  if (info.contains ("total_frames") &&
      whole_number (info["total_frames"], 0, kMaxCount, "info.json: total_frames", &total,
                    nullptr) &&
      total != frames)
    return fail (error, "info.json: total_frames is " + std::to_string (total) +
                            ", the episodes' lengths add up to " + std::to_string (frames));
  return true;
}

} // namespace pi0::lerobot
