// Prepared forms of a model's weights that every session of the model shares (the CPU backend's
// packed dense layers): made once, by the first session that needs one, and released with the
// model. Thread-safe.
#ifndef FFLITE_RUNTIME_SRC_BASE_SHARED_FORMS_H_
#define FFLITE_RUNTIME_SRC_BASE_SHARED_FORMS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace fflite {

class SharedForms {
 public:
  // A prepared form, type-erased (its maker and its users agree on the type through the key),
  // and the bytes it holds.
  struct Form {
    std::shared_ptr<const void> value;
    uint64_t bytes = 0;
  };

  // The form under `key`, made by `make` if none is there yet. Sessions that ask for the same key
  // while it is being made wait for it (one maker at a time per key; other keys go on); a failed
  // make leaves no form, so the next caller tries again and the error reaches every caller that
  // made the attempt.
  absl::StatusOr<std::shared_ptr<const void>> GetOrMake(
      const std::string& key, const std::function<absl::StatusOr<Form>()>& make) {
    std::shared_ptr<Entry> entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<Entry>& e = entries_[key];
      if (e == nullptr) e = std::make_shared<Entry>();
      entry = e;
    }
    std::lock_guard<std::mutex> lock(entry->mu);
    if (entry->form.value == nullptr) {
      absl::StatusOr<Form> made = make();
      if (!made.ok()) return made.status();
      entry->form = std::move(*made);
      std::lock_guard<std::mutex> total(mu_);
      bytes_ += entry->form.bytes;
    }
    return entry->form.value;
  }

  // Bytes of every form made so far.
  uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  struct Entry {
    std::mutex mu;  // held while the form is made
    Form form;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  uint64_t bytes_ = 0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_SHARED_FORMS_H_
