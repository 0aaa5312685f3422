/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Arrow tables and their cells as LeRobot's files hold them: a Parquet file read whole, typed
 * cells that say false for a missing or mistyped value (a hostile file gives a message, never an
 * exception), and the columns the writer builds, typed as the `datasets` library writes them. */

#include <arrow/api.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pi0::lerobot
{

/* ---- Reading ---- */

/* @p whole, its chunks combined, or nullptr with a message. */
std::shared_ptr<arrow::Table> read_parquet (const std::filesystem::path &p, std::string *error);

/* Column @name of @t as one array, or nullptr with a message. */
std::shared_ptr<arrow::Array> column (const std::shared_ptr<arrow::Table> &t,
                                      const std::string &name, const std::filesystem::path &file,
                                      std::string *error);

bool int64_at (const std::shared_ptr<arrow::Array> &a, int64_t row, int64_t *out);
/* A double or float cell. */
bool double_at (const std::shared_ptr<arrow::Array> &a, int64_t row, double *out);
/* All numbers of a (possibly nested) list cell, flattened. */
bool flatten_numbers (const std::shared_ptr<arrow::Array> &a, int64_t row,
                      std::vector<double> *out);
/* A string list cell (list or large_list of string or large_string); a null cell is empty. */
bool strings_at (const std::shared_ptr<arrow::Array> &a, int64_t row,
                 std::vector<std::string> *out);
/* A string cell (string or large_string). */
bool string_at (const std::shared_ptr<arrow::Array> &a, int64_t row, std::string *out);

/* ---- Building ---- */

/* An Arrow call that must succeed while a table is built: its failure (out of memory) throws,
 * and Writer::commit turns that into a message. */
#define PI0_TRY(expr)                                                                              \
  do {                                                                                             \
    arrow::Status _s = (expr);                                                                     \
    if (!_s.ok ())                                                                                 \
      throw std::runtime_error (_s.ToString ());                                                   \
  } while (0)

std::shared_ptr<arrow::Array> finish (arrow::ArrayBuilder &b);
/* @n rows of fixed_size_list<float>[@dim] from row-major @v. */
std::shared_ptr<arrow::Array> float_lists (const std::vector<float> &v, int32_t dim, size_t n);
std::shared_ptr<arrow::Array> int64s (const std::vector<int64_t> &v);
/* list<T> with the child named "element", as the `datasets` library writes lists. */
std::shared_ptr<arrow::DataType> list_of (const std::shared_ptr<arrow::DataType> &t);
/* list<double> per row (depth 1), or list<list<list<double>>> with [c][1][1] (images). */
std::shared_ptr<arrow::Array> stat_column (const std::vector<const std::vector<double> *> &rows,
                                           bool image);
/* list<int64> of one count per row. */
std::shared_ptr<arrow::Array> count_column (const std::vector<int64_t> &counts);

} // namespace pi0::lerobot
