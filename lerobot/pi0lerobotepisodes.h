/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A dataset's episodes read back: the rows of meta/episodes, each checked as far as playing or
 * appending to it needs, the tasks of meta/tasks.parquet, and which rows info.json commits. */

#include "common/pi0json.h"
#include "lerobot/pi0lerobot.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace pi0::lerobot
{

/* One committed (or committing) episode row. */
struct Row {
  EpisodeInfo info;
  int64_t meta_chunk = 0, meta_file = 0;
  std::vector<Stats> stats; /* per feature_keys() */
};

/* Reads every meta/episodes file (sorted, as LeRobot's loader) into rows; a row that cannot be
 * played as it says is an error. */
bool read_episode_rows (const std::filesystem::path &root, const Schema &schema,
                        std::vector<Row> *rows, std::string *error);
/* meta/tasks.parquet's tasks by task_index: a row per task, in task_index order 0..N-1 (LeRobot
 * finds a frame's task by row position, tasks.iloc[task_index], so rows in another order would
 * give frames another task than the file says). A missing file is no tasks when not @required
 * (a dataset that committed no episode yet), an error otherwise (LeRobot cannot load it). */
bool read_tasks (const std::filesystem::path &root, std::vector<std::string> *tasks,
                 std::string *error, bool required = false);
/* info.json's total_episodes, checked against the rows: every episode it counts has a row
 * (rows beyond it are a crash's uncommitted episodes, which are not played). */
bool committed_episodes (const pi0::json::Value &info, const std::vector<Row> &rows,
                         int64_t *committed, std::string *error);

} // namespace pi0::lerobot
