/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Server: the registry that pairs an element pair's ends by name, and the server's life (start
 * runs the server thread and its GLib main context, drain and stop end it). What runs on that
 * thread is Server::Impl's (pi0serverimpl.h); the request queue is pi0serverqueue.cpp's. The locks
 * and their order: pi0serverimpl.h. */
#include "serve/pi0server.h"

#include "serve/pi0serverimpl.h"

#include <future>
#include <map>

namespace pi0::serve
{

namespace
{

std::mutex registry_lock;
std::map<std::string, std::weak_ptr<Server>> registry;

} // namespace

std::shared_ptr<Server>
Server::get (const std::string &name)
{
  std::lock_guard<std::mutex> lk (registry_lock);
  auto &slot = registry[name];
  if (auto s = slot.lock ())
    return s;
  std::shared_ptr<Server> s (new Server (name));
  slot = s;
  return s;
}

Server::Server (std::string name) : name_ (std::move (name)) {}

Server::~Server ()
{
  stop ();
  std::lock_guard<std::mutex> lk (registry_lock);
  auto it = registry.find (name_);
  if (it != registry.end () && it->second.expired ())
    registry.erase (it);
}

bool
Server::start (const ServerSettings &settings, std::string *error)
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (running_.load ()) {
    *error = "the server '" + name_ + "' is already running (two pi0servesrc with one name?)";
    return false;
  }
  if (settings.max_clients < 1 || settings.max_message < 64) {
    *error = "max-clients must be at least 1 and max-message-size at least 64 bytes";
    return false;
  }
  settings_ = settings;
  settings_.limits.max_message = settings.max_message;
  {
    std::lock_guard<std::mutex> lk (lock_);
    queue_.clear ();
    stopping_ = false;
    flushing_ = false;
    stats_ = ServerStats ();
  }
  context_ = g_main_context_new ();
  std::promise<std::string> started;
  auto result = started.get_future ();
  thread_ = std::thread ([this, &started] {
    g_main_context_push_thread_default (context_);
    auto impl = new Impl (this);
    impl->loop = g_main_loop_new (context_, FALSE);
    std::string err;
    if (!impl->open (&err)) {
      GMainLoop *loop = impl->loop;
      delete impl;
      g_main_loop_unref (loop);
      g_main_context_pop_thread_default (context_);
      started.set_value (err.empty () ? "could not start" : err);
      return;
    }
    impl_ = impl;
    port_.store (impl->port);
    started.set_value ("");
    g_main_loop_run (impl->loop);
    GMainLoop *loop = impl->loop;
    impl_ = nullptr;
    delete impl;
    /* What the sockets still had queued (closes, destroy notifies). */
    while (g_main_context_iteration (context_, FALSE))
      ;
    g_main_loop_unref (loop);
    g_main_context_pop_thread_default (context_);
  });
  std::string err = result.get ();
  if (!err.empty ()) {
    thread_.join ();
    g_main_context_unref (context_);
    context_ = nullptr;
    *error = err;
    return false;
  }
  running_.store (true);
  return true;
}

void
Server::drain ()
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (!running_.load ())
    return;
  on_server_thread ([] (Impl &impl) { impl.begin_drain (); });
}

void
Server::on_server_thread (void (*fn) (Impl &))
{
  struct Call {
    Server *server;
    void (*fn) (Impl &);
  };
  g_main_context_invoke_full (
      context_, G_PRIORITY_DEFAULT,
      [] (gpointer d) -> gboolean {
        auto c = static_cast<Call *> (d);
        if (c->server->impl_)
          c->fn (*c->server->impl_);
        return G_SOURCE_REMOVE;
      },
      new Call{this, fn}, [] (gpointer d) { delete static_cast<Call *> (d); });
}

void
Server::stop ()
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (!running_.load ())
    return;
  {
    std::lock_guard<std::mutex> lk (lock_);
    stopping_ = true;
    queue_.clear ();
  }
  cond_.notify_all ();
  on_server_thread ([] (Impl &impl) { impl.begin_shutdown (); });
  thread_.join ();
  {
    std::lock_guard<std::mutex> lk (lock_);
    running_.store (false);
    ready_.store (false);
    queue_.clear ();
    stats_.open = 0;
    stats_.peers = 0;
    stats_.queued = 0;
  }
  /* Answers posted after the loop ended are freed with their sources here. */
  g_main_context_unref (context_);
  context_ = nullptr;
  port_.store (0);
}

} // namespace pi0::serve
