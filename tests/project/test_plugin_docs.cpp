/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The plugin's documentation against the plugin itself: every element's page in docs/elements/
 * names each property it adds, each pad and each stats field, and the launch lines in the docs'
 * code blocks use only properties and enum values our elements have. */

#include "tests/pi0testenv.h"
#include "tests/pi0testgst.h"

#include <gst/gst.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace pi0test;


/* The names of our element factories: the test main registers our elements without a plugin
 * (tests/pi0testmain.cpp), so they are the ones with no plugin name. */
static std::vector<std::string>
our_elements ()
{
  std::vector<std::string> names;
  GList *features = gst_registry_get_feature_list (gst_registry_get (), GST_TYPE_ELEMENT_FACTORY);
  for (GList *l = features; l; l = l->next)
    if (!gst_plugin_feature_get_plugin_name (GST_PLUGIN_FEATURE (l->data)))
      names.push_back (gst_plugin_feature_get_name (GST_PLUGIN_FEATURE (l->data)));
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
