// What the probe delivered during a test, and waiting for what it should deliver: for
// tests of the probe on the real kernel (privileged/probe_*_test.cpp).
#pragma once

#include <poll.h>

#include <chrono>
#include <functional>
#include <optional>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "probe/probe.h"

namespace gdw::test {

// Everything the probe delivered during a test, and waiting for what it should deliver.
class EventLog {
 public:
  explicit EventLog(Probe& probe) : probe_(probe) {}

  // Consumes until an event of type E satisfies `match`, or the timeout passes.
  template <class E>
  std::optional<E> wait_for(const std::function<bool(const E&)>& match,
                            std::chrono::milliseconds timeout = std::chrono::seconds(3)) {
    std::size_t checked = 0;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (; checked < events_.size(); ++checked) {
        if (auto* e = std::get_if<E>(&events_[checked]); e && match(*e)) return *e;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      pollfd pfd{probe_.fd(), POLLIN, 0};
      ::poll(&pfd, 1, 20);
      auto consumed = probe_.consume([this](const ProbeEvent& e) { events_.push_back(e); });
      if (!consumed) {
        ADD_FAILURE() << consumed.error().message;
        return std::nullopt;
      }
    }
  }

  template <class E>
  std::vector<E> all(const std::function<bool(const E&)>& match) const {
    std::vector<E> out;
    for (const auto& event : events_) {
      if (auto* e = std::get_if<E>(&event); e && match(*e)) out.push_back(*e);
    }
    return out;
  }

 private:
  Probe& probe_;
  std::vector<ProbeEvent> events_;
};

}  // namespace gdw::test
