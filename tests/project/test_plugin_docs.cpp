/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The plugin's documentation against the plugin itself: every element's page in docs/elements/
 * names each property it adds, each pad and each stats field, its properties table says each
 * property's type, range, default and mutability as the param spec does (which a fresh element
 * starts at), and the launch lines in the docs' code blocks use only properties and enum values
 * our elements have. */

#include "tests/pi0testenv.h"
#include "tests/pi0testgst.h"

#include <gst/gst.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace pi0test;

/* The names of our element factories: the test main registers our elements without a plugin
 * (tests/pi0testmain.cpp), so they are the ones with no plugin name; and those of the pi0ros2
 * plugin (gst/ros2/), a plugin of its own, on the plugin path when it was built. */
static std::vector<std::string>
our_elements ()
{
  std::vector<std::string> names;
  GList *features = gst_registry_get_feature_list (gst_registry_get (), GST_TYPE_ELEMENT_FACTORY);
  for (GList *l = features; l; l = l->next) {
    GstPluginFeature *f = GST_PLUGIN_FEATURE (l->data);
    const char *plugin = gst_plugin_feature_get_plugin_name (f);
    if (g_strcmp0 (plugin, "pi0ros2") == 0) {
      /* Loaded, so that its element type exists for the checks. */
      if (GstPluginFeature *loaded = gst_plugin_feature_load (f))
        gst_object_unref (loaded);
      else
        ADD_FAILURE () << "the pi0ros2 plugin's " << gst_plugin_feature_get_name (f)
                       << " did not load";
    }
    if (!plugin || g_strcmp0 (plugin, "pi0ros2") == 0)
      names.push_back (gst_plugin_feature_get_name (f));
  }
  gst_plugin_feature_list_free (features);
  return names;
}

/* docs/elements/@name.md, or "" when there is none. */
static std::string
element_page (const std::string &name)
{
  std::ifstream in (source_root () + "/docs/elements/" + name + ".md");
  std::stringstream page;
  page << in.rdbuf ();
  return page.str ();
}

/* Every element of the plugin has its page in docs/elements/: every property it adds (not its
 * base class's) and every pad is there as `name`, and an example line. */
TEST (PluginDocs, EveryPropertyAndPadIsOnTheElementsPage)
{
  int elements = 0, checked = 0;
  for (const auto &name : our_elements ()) {
    GstElementFactory *f = gst_element_factory_find (name.c_str ());
    ASSERT_NE (f, nullptr) << name;
    const std::string page = element_page (name);
    EXPECT_FALSE (page.empty ()) << "docs/elements/" << name << ".md is missing";
    GType type = gst_element_factory_get_element_type (f);
    GObjectClass *klass = G_OBJECT_CLASS (g_type_class_ref (type));
    guint n = 0;
    GParamSpec **specs = g_object_class_list_properties (klass, &n);
    for (guint i = 0; i < n; i++) {
      if (specs[i]->owner_type != type)
        continue;
      checked++;
      EXPECT_NE (page.find (std::string ("`") + specs[i]->name + "`"), std::string::npos)
          << name << "'s property " << specs[i]->name << " is not in docs/elements/" << name
          << ".md";
    }
    g_free (specs);
    g_type_class_unref (klass);
    /* Its pads (a template with a conversion, as "%s", is described, not named) and a line to
     * try it with. */
    EXPECT_NE (page.find ("\n## Pads\n"), std::string::npos) << name << ": no Pads section";
    for (const GList *t = gst_element_factory_get_static_pad_templates (f); t; t = t->next) {
      const char *tmpl = ((GstStaticPadTemplate *)t->data)->name_template;
      if (!std::strchr (tmpl, '%')) {
        EXPECT_NE (page.find (std::string ("`") + tmpl + "`"), std::string::npos)
            << name << "'s pad " << tmpl << " is not in docs/elements/" << name << ".md";
      }
    }
    EXPECT_NE (page.find ("gst-launch-1.0 "), std::string::npos)
        << "docs/elements/" << name << ".md has no example line";
    gst_object_unref (f);
    elements++;
  }
  EXPECT_GE (elements, 8);
  EXPECT_GE (checked, 50);
  std::printf ("%d elements, %d properties on their pages\n", elements, checked);
}

/* The field names of @st and of the structures inside it. */
static void
structure_fields (const GstStructure *st, std::vector<std::string> &out)
{
  for (int i = 0; i < gst_structure_n_fields (st); i++) {
    const char *f = gst_structure_nth_field_name (st, (guint)i);
    out.push_back (f);
    const GValue *v = gst_structure_get_value (st, f);
    if (GST_VALUE_HOLDS_STRUCTURE (v))
      structure_fields (gst_value_get_structure (v), out);
  }
}

/* Every counter in an element's `stats` (as a fresh element reports them) is on its page. */
TEST (PluginDocs, EveryStatsFieldIsOnTheElementsPage)
{
  int checked = 0;
  for (const auto &name : our_elements ()) {
    ElementPtr e (gst_element_factory_make (name.c_str (), nullptr));
    ASSERT_NE (e, nullptr) << name;
    if (!g_object_class_find_property (G_OBJECT_GET_CLASS (e.get ()), "stats"))
      continue;
    GstStructure *st = nullptr;
    g_object_get (e.get (), "stats", &st, nullptr);
    ASSERT_NE (st, nullptr) << name;
    std::vector<std::string> fields;
    structure_fields (st, fields);
    gst_structure_free (st);
    const std::string page = element_page (name);
    for (const auto &f : fields) {
      EXPECT_NE (page.find ("`" + f + "`"), std::string::npos)
          << name << "'s stats field " << f << " is not in docs/elements/" << name << ".md";
      checked++;
    }
  }
  EXPECT_GE (checked, 20);
  std::printf ("%d stats fields on their pages\n", checked);
}

/* ---- Defaults, ranges and mutability on the pages ---------------------------------------- */

/* What a page's properties table says of one property. Every page writes the table alike:
 *
 *   | property | type | range | default | mutable | meaning |
 *
 * type: the GLib type as a word (int, uint, int64, uint64, double, float, bool, string, enum,
 * array, structure), then any unit or values; range (numbers, and an array's elements): LO..HI,
 * `min` and `max` standing for the type's own bounds; default: a number with an optional unit
 * (ns, us, ms, s, min, h; KiB, MiB, GiB), -1 for an unsigned property's largest value, true or
 * false, an enum's `nick`, a string as `text` or `""`, `none` for NULL, an array as
 * `<a, b, c>`; mutable: READY, PLAYING, construct-only, read-only or write-only. Read-only
 * properties leave range and default empty. */
struct PropertyRow {
  std::string type, range, dflt, mutability;
};

static std::string
trim (const std::string &s)
{
  const size_t a = s.find_first_not_of (" \t"), b = s.find_last_not_of (" \t");
  return a == std::string::npos ? "" : s.substr (a, b - a + 1);
}

/* The cells of a table line ("\|" is a '|' inside a cell). */
static std::vector<std::string>
table_cells (const std::string &line)
{
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size (); i++) {
    if (line[i] == '\\' && i + 1 < line.size () && line[i + 1] == '|') {
      cell += '|';
      i++;
    } else if (line[i] == '|') {
      cells.push_back (trim (cell));
      cell.clear ();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

static const char *kPropertiesHeader = "| property | type | range | default | mutable | meaning |";

/* The rows of @page's properties table, by property name (a first cell `name`; a row naming
 * several, such as the base class's, is not one property's). */
static std::map<std::string, PropertyRow>
property_rows (const std::string &page, bool *has_table)
{
  std::map<std::string, PropertyRow> rows;
  std::istringstream in (page);
  std::string line;
  bool table = false;
  *has_table = false;
  while (std::getline (in, line)) {
    if (line == kPropertiesHeader) {
      table = *has_table = true;
      continue;
    }
    if (!table)
      continue;
    if (line.empty () || line[0] != '|')
      break;
    const std::vector<std::string> c = table_cells (line);
    if (c.size () < 6 || c[0].size () < 3 || c[0].front () != '`' || c[0].back () != '`' ||
        c[0].find ('`', 1) != c[0].size () - 1)
      continue;
    rows[c[0].substr (1, c[0].size () - 2)] = {c[1], c[2], c[3], c[4]};
  }
  return rows;
}

/* The word the type column starts with, for @ps. */
static std::string
type_word (GParamSpec *ps)
{
  const std::vector<std::pair<GType, const char *>> words = {
      {G_TYPE_INT, "int"},       {G_TYPE_UINT, "uint"},
      {G_TYPE_INT64, "int64"},   {G_TYPE_UINT64, "uint64"},
      {G_TYPE_DOUBLE, "double"}, {G_TYPE_FLOAT, "float"},
      {G_TYPE_BOOLEAN, "bool"},  {G_TYPE_STRING, "string"},
      {GST_TYPE_ARRAY, "array"}, {GST_TYPE_STRUCTURE, "structure"}};
  for (const auto &[type, word] : words)
    if (ps->value_type == type)
      return word;
  return G_TYPE_IS_ENUM (ps->value_type) ? "enum" : g_type_name (ps->value_type);
}

static std::string
mutability (GParamSpec *ps)
{
  if (!(ps->flags & G_PARAM_WRITABLE))
    return "read-only";
  if (!(ps->flags & G_PARAM_READABLE))
    return "write-only";
  if (ps->flags & G_PARAM_CONSTRUCT_ONLY)
    return "construct-only";
  if (ps->flags & GST_PARAM_MUTABLE_PLAYING)
    return "PLAYING";
  if (ps->flags & GST_PARAM_MUTABLE_READY)
    return "READY";
  return "any time"; /* not a spelling of ours (gstpi0props.h): the page cannot match it */
}

/* A numeric spec's bounds and default (an array's: its elements'). */
struct Numeric {
  GParamSpec *ps = nullptr;
  long double lo = 0, hi = 0, dflt = 0;
  long double type_lo = 0, type_hi = 0; /* what `min` and `max` stand for */
  bool is_unsigned = false;
};

static bool
numeric (GParamSpec *ps, Numeric *n)
{
  n->ps = ps;
  if (GST_IS_PARAM_SPEC_ARRAY_LIST (ps))
    return GST_PARAM_SPEC_ARRAY_LIST (ps)->element_spec &&
           numeric (GST_PARAM_SPEC_ARRAY_LIST (ps)->element_spec, n);
#define PI0_NUMERIC(CHECK, CAST, TYPE_LO, TYPE_HI)                                                 \
  if (CHECK (ps)) {                                                                                \
    n->lo = (long double)CAST (ps)->minimum;                                                       \
    n->hi = (long double)CAST (ps)->maximum;                                                       \
    n->dflt = (long double)CAST (ps)->default_value;                                               \
    n->type_lo = (long double)(TYPE_LO);                                                           \
    n->type_hi = (long double)(TYPE_HI);                                                           \
    n->is_unsigned = n->type_lo == 0;                                                              \
    return true;                                                                                   \
  }
  PI0_NUMERIC (G_IS_PARAM_SPEC_INT, G_PARAM_SPEC_INT, G_MININT, G_MAXINT)
  PI0_NUMERIC (G_IS_PARAM_SPEC_UINT, G_PARAM_SPEC_UINT, 0, G_MAXUINT)
  PI0_NUMERIC (G_IS_PARAM_SPEC_INT64, G_PARAM_SPEC_INT64, G_MININT64, G_MAXINT64)
  PI0_NUMERIC (G_IS_PARAM_SPEC_UINT64, G_PARAM_SPEC_UINT64, 0, G_MAXUINT64)
  PI0_NUMERIC (G_IS_PARAM_SPEC_DOUBLE, G_PARAM_SPEC_DOUBLE, -G_MAXDOUBLE, G_MAXDOUBLE)
  PI0_NUMERIC (G_IS_PARAM_SPEC_FLOAT, G_PARAM_SPEC_FLOAT, -G_MAXFLOAT, G_MAXFLOAT)
#undef PI0_NUMERIC
  return false;
}

/* @text as a value of @n's type, as the pages write numbers; false when it is not one. */
static bool
parse_number (std::string text, const Numeric &n, long double *out)
{
  for (size_t p; (p = text.find ("\u2212")) != std::string::npos;)
    text.replace (p, strlen ("\u2212"), "-"); /* the pages' minus sign */
  text = trim (text);
  if (text == "max" || (text == "-1" && n.is_unsigned)) {
    *out = n.type_hi;
    return true;
  }
  if (text == "min") {
    *out = n.type_lo;
    return true;
  }
  static const std::vector<std::pair<std::string, long double>> units = {
      {"ns", 1},           {"us", 1e3L},          {"\u00b5s", 1e3L}, {"ms", 1e6L},
      {"s", 1e9L},         {"min", 60e9L},        {"h", 3600e9L},    {"KiB", 1024.0L},
      {"MiB", 1048576.0L}, {"GiB", 1073741824.0L}};
  long double scale = 1;
  for (const auto &[unit, factor] : units) {
    const std::string tail = " " + unit;
    if (text.size () > tail.size () &&
        text.compare (text.size () - tail.size (), tail.size (), tail) == 0) {
      text = text.substr (0, text.size () - tail.size ());
      scale = factor;
      break;
    }
  }
  char *end = nullptr;
  const long double v = std::strtold (text.c_str (), &end);
  if (text.empty () || !end || *end)
    return false;
  *out = v * scale;
  return true;
}

/* Whether @a and @b are the same value of @n's type (a float or double as that type holds it). */
static bool
same_number (const Numeric &n, long double a, long double b)
{
  GParamSpec *ps =
      GST_IS_PARAM_SPEC_ARRAY_LIST (n.ps) ? GST_PARAM_SPEC_ARRAY_LIST (n.ps)->element_spec : n.ps;
  if (G_IS_PARAM_SPEC_FLOAT (ps))
    return (float)a == (float)b;
  if (G_IS_PARAM_SPEC_DOUBLE (ps))
    return (double)a == (double)b;
  return a == b;
}

/* Whether the page's @text is @ps's default, a non-numeric one (@instance: the element, for an
 * array, whose spec has no default of its own). */
static bool
same_default (GParamSpec *ps, const std::string &text, GObject *instance)
{
  if (G_IS_PARAM_SPEC_STRING (ps)) {
    const char *d = G_PARAM_SPEC_STRING (ps)->default_value;
    if (text == "none")
      return d == nullptr;
    if (text == "`\"\"`" || text == "\"\"")
      return d && !*d;
    return d && text.size () >= 2 && text.front () == '`' && text.back () == '`' &&
           text.substr (1, text.size () - 2) == d;
  }
  if (G_IS_PARAM_SPEC_BOOLEAN (ps))
    return text == (G_PARAM_SPEC_BOOLEAN (ps)->default_value ? "true" : "false");
  if (G_IS_PARAM_SPEC_ENUM (ps)) {
    GEnumValue *v = g_enum_get_value (G_PARAM_SPEC_ENUM (ps)->enum_class,
                                      G_PARAM_SPEC_ENUM (ps)->default_value);
    return v && text == std::string ("`") + v->value_nick + "`";
  }
  if (GST_IS_PARAM_SPEC_ARRAY_LIST (ps)) {
    Numeric n;
    if (!numeric (ps, &n) || text.size () < 4 || text.substr (0, 2) != "`<" ||
        text.substr (text.size () - 2) != ">`")
      return false;
    GValue v = G_VALUE_INIT;
    g_value_init (&v, ps->value_type);
    g_object_get_property (instance, ps->name, &v);
    std::vector<std::string> items;
    std::istringstream in (text.substr (2, text.size () - 4));
    for (std::string item; std::getline (in, item, ',');)
      items.push_back (item);
    bool same = items.size () == gst_value_array_get_size (&v);
    for (guint i = 0; same && i < items.size (); i++) {
      const GValue *e = gst_value_array_get_value (&v, i);
      long double x = 0;
      same = G_VALUE_HOLDS_FLOAT (e) && parse_number (items[i], n, &x) &&
             same_number (n, x, g_value_get_float (e));
    }
    g_value_unset (&v);
    return same;
  }
  return false;
}

/* @ps's default as a page writes it (an array's: @instance's value). */
static std::string
page_text (GParamSpec *ps, GObject *instance)
{
  Numeric n;
  if (numeric (ps, &n) && !GST_IS_PARAM_SPEC_ARRAY_LIST (ps)) {
    if (n.is_unsigned && n.dflt == n.type_hi)
      return "-1 (max)";
    return n.dflt == (long double)(gint64)n.dflt ? std::to_string ((gint64)n.dflt)
                                                 : std::to_string ((double)n.dflt);
  }
  GValue v = G_VALUE_INIT;
  g_value_init (&v, ps->value_type);
  if (GST_IS_PARAM_SPEC_ARRAY_LIST (ps))
    g_object_get_property (instance, ps->name, &v);
  else
    g_param_value_set_default (ps, &v);
  std::string text;
  if (G_VALUE_HOLDS_STRING (&v))
    text = !g_value_get_string (&v)    ? "none"
           : !*g_value_get_string (&v) ? "`\"\"`"
                                       : std::string ("`") + g_value_get_string (&v) + "`";
  else if (G_VALUE_HOLDS_BOOLEAN (&v))
    text = g_value_get_boolean (&v) ? "true" : "false";
  else if (G_VALUE_HOLDS_ENUM (&v)) {
    GEnumValue *e = g_enum_get_value (G_PARAM_SPEC_ENUM (ps)->enum_class, g_value_get_enum (&v));
    text = e ? std::string ("`") + e->value_nick + "`" : "?";
  } else {
    gchar *c = gst_value_serialize (&v);
    text = c ? std::string ("`") + c + "`" : "?";
    g_free (c);
  }
  g_value_unset (&v);
  return text;
}

/* A bound as a page writes it. */
static std::string
page_bound (const Numeric &n, long double v)
{
  if (v == n.type_hi)
    return "max";
  if (v == n.type_lo && !n.is_unsigned)
    return "min";
  return v == (long double)(gint64)v ? std::to_string ((gint64)v) : std::to_string ((double)v);
}

/* gst-inspect shows a fresh element's values as the defaults: each of our readable and writable
 * properties starts at its param spec's default, so gst-inspect, the spec and the page (the test
 * below) say one thing. */
TEST (PluginDocs, EveryPropertyStartsAtItsParamSpecsDefault)
{
  int checked = 0;
  for (const auto &name : our_elements ()) {
    ElementPtr e (gst_element_factory_make (name.c_str (), nullptr));
    ASSERT_NE (e, nullptr) << name;
    const GType type = G_OBJECT_TYPE (e.get ());
    guint n = 0;
    GParamSpec **specs = g_object_class_list_properties (G_OBJECT_GET_CLASS (e.get ()), &n);
    for (guint i = 0; i < n; i++) {
      GParamSpec *ps = specs[i];
      if (ps->owner_type != type || !(ps->flags & G_PARAM_READABLE) ||
          !(ps->flags & G_PARAM_WRITABLE) || GST_IS_PARAM_SPEC_ARRAY_LIST (ps))
        continue; /* an array's spec has no default of its own: the page check reads the element */
      GValue v = G_VALUE_INIT;
      g_value_init (&v, ps->value_type);
      g_object_get_property (G_OBJECT (e.get ()), ps->name, &v);
      if (!g_param_value_defaults (ps, &v)) {
        gchar *now = g_strdup_value_contents (&v);
        ADD_FAILURE () << name << "'s " << ps->name << " starts at " << now
                       << ", not at its param spec's default ("
                       << page_text (ps, G_OBJECT (e.get ()))
                       << "): its Settings member and its param spec disagree";
        g_free (now);
      }
      g_value_unset (&v);
      checked++;
    }
    g_free (specs);
  }
  EXPECT_GE (checked, 60);
  std::printf ("%d properties start at their defaults\n", checked);
}

/* Each of our properties' row on its element's page (the format above) says the param spec's
 * type, range, default and mutability: a default changed in the code, or a page written from
 * memory, shows up here. */
TEST (PluginDocs, EveryPagesDefaultsAndRangesAreTheParamSpecs)
{
  int checked = 0;
  for (const auto &name : our_elements ()) {
    ElementPtr e (gst_element_factory_make (name.c_str (), nullptr));
    ASSERT_NE (e, nullptr) << name;
    const std::string where = "docs/elements/" + name + ".md";
    bool has_table = false;
    const std::map<std::string, PropertyRow> rows = property_rows (element_page (name), &has_table);
    EXPECT_TRUE (has_table) << where << " has no line \"" << kPropertiesHeader << "\"";
    const GType type = G_OBJECT_TYPE (e.get ());
    guint n = 0;
    GParamSpec **specs = g_object_class_list_properties (G_OBJECT_GET_CLASS (e.get ()), &n);
    for (guint i = 0; i < n; i++) {
      GParamSpec *ps = specs[i];
      if (ps->owner_type != type)
        continue;
      const std::string what = where + ", `" + ps->name + "`: ";
      auto it = rows.find (ps->name);
      if (it == rows.end ()) {
        ADD_FAILURE () << what << "no row of its own in the properties table";
        continue;
      }
      const PropertyRow &r = it->second;
      checked++;
      const std::string word = type_word (ps);
      EXPECT_TRUE (r.type == word || r.type.rfind (word + " ", 0) == 0 ||
                   r.type.rfind (word + ",", 0) == 0)
          << what << "type \"" << r.type << "\", the param spec's is " << word;
      EXPECT_EQ (r.mutability, mutability (ps)) << what << "mutable";
      if (!(ps->flags & G_PARAM_WRITABLE)) {
        EXPECT_TRUE (r.range.empty () && r.dflt.empty ())
            << what << "read-only: no range or default (\"" << r.range << "\", \"" << r.dflt
            << "\")";
        continue;
      }
      Numeric num;
      if (numeric (ps, &num)) {
        long double lo = 0, hi = 0;
        const size_t dots = r.range.find ("..");
        const bool parsed = dots != std::string::npos &&
                            parse_number (r.range.substr (0, dots), num, &lo) &&
                            parse_number (r.range.substr (dots + 2), num, &hi);
        EXPECT_TRUE (parsed && same_number (num, lo, num.lo) && same_number (num, hi, num.hi))
            << what << "range \"" << r.range << "\", the param spec's is "
            << page_bound (num, num.lo) << ".." << page_bound (num, num.hi);
        if (!GST_IS_PARAM_SPEC_ARRAY_LIST (ps)) {
          long double d = 0;
          EXPECT_TRUE (parse_number (r.dflt, num, &d) && same_number (num, d, num.dflt))
              << what << "default \"" << r.dflt << "\", the param spec's is "
              << page_text (ps, G_OBJECT (e.get ()));
          continue;
        }
      } else {
        EXPECT_TRUE (r.range.empty ()) << what << "a range (\"" << r.range << "\") for a " << word;
      }
      EXPECT_TRUE (same_default (ps, r.dflt, G_OBJECT (e.get ())))
          << what << "default \"" << r.dflt << "\", the param spec's is "
          << page_text (ps, G_OBJECT (e.get ()));
    }
    g_free (specs);
  }
  EXPECT_GE (checked, 80);
  std::printf ("%d properties' type, range, default and mutability checked on their pages\n",
               checked);
}

/* The launch lines in the docs' code blocks (README, docs/, pipelines/README.md) use only
 * properties our elements have, with enum values they accept: a renamed property or value
 * shows up here instead of in a user's terminal. Placeholders ("...", "$VAR") are skipped. */
TEST (PluginDocs, LaunchLinesInTheDocsUseRealPropertiesAndValues)
{
  std::vector<std::string> files = {"README.md", "pipelines/README.md"};
  for (const char *dir : {"docs", "docs/elements"}) {
    GDir *d = g_dir_open ((source_root () + "/" + dir).c_str (), 0, nullptr);
    ASSERT_NE (d, nullptr) << dir;
    while (const gchar *n = g_dir_read_name (d))
      if (g_str_has_suffix (n, ".md"))
        files.push_back (std::string (dir) + "/" + n);
    g_dir_close (d);
  }
  int checked = 0;
  for (const auto &file : files) {
    std::ifstream in (source_root () + "/" + file);
    std::string line;
    bool code = false;
    int lineno = 0;
    GstElementFactory *element = nullptr; /* ours, whose properties follow (across a "\") */
    while (std::getline (in, line)) {
      lineno++;
      if (line.rfind ("```", 0) == 0) {
        code = !code;
        continue;
      }
      if (!code)
        continue;
      /* Whitespace-separated words, a quoted value kept with its key. */
      std::vector<std::string> words;
      std::string w;
      bool quoted = false;
      for (char c : line + " ") {
        if (c == '"')
          quoted = !quoted;
        if (!quoted && (c == ' ' || c == '\t')) {
          if (!w.empty ())
            words.push_back (w);
          w.clear ();
        } else {
          w += c;
        }
      }
      for (const auto &word : words) {
        const size_t eq = word.find ('=');
        if (word == "\\")
          continue;
        if (eq == std::string::npos || word[0] == '-') {
          if (element)
            gst_object_unref (element);
          element = gst_element_factory_find (word.c_str ());
          if (element && gst_plugin_feature_get_plugin_name (GST_PLUGIN_FEATURE (element))) {
            gst_object_unref (element); /* not one of ours */
            element = nullptr;
          }
          continue;
        }
        if (!element)
          continue;
        const std::string key = word.substr (0, eq), value = word.substr (eq + 1);
        const char *name = gst_plugin_feature_get_name (GST_PLUGIN_FEATURE (element));
        GObjectClass *klass =
            G_OBJECT_CLASS (g_type_class_ref (gst_element_factory_get_element_type (element)));
        GParamSpec *ps = g_object_class_find_property (klass, key.c_str ());
        EXPECT_NE (ps, nullptr) << file << ":" << lineno << ": " << name << " has no property "
                                << key;
        if (ps && G_IS_PARAM_SPEC_ENUM (ps) && value.find ("...") == std::string::npos &&
            value.find ('$') == std::string::npos) {
          GEnumClass *e = G_PARAM_SPEC_ENUM (ps)->enum_class;
          EXPECT_TRUE (g_enum_get_value_by_nick (e, value.c_str ()) ||
                       g_enum_get_value_by_name (e, value.c_str ()))
              << file << ":" << lineno << ": " << name << " " << key << " has no value " << value;
        }
        checked++;
        g_type_class_unref (klass);
      }
      const bool continued = !words.empty () && words.back () == "\\";
      if (element && !continued) {
        gst_object_unref (element);
        element = nullptr;
      }
    }
    if (element)
      gst_object_unref (element);
  }
  EXPECT_GE (checked, 50);
  std::printf ("%d property settings in the docs' launch lines checked\n", checked);
}
