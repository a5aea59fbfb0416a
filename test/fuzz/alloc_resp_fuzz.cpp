// AllocResp's two decoders on arbitrary bytes: the protobuf one and base64. No crash; what
// decodes re-encodes to something that decodes to the same; base64 is canonical both ways.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kubelet/checkpoint.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);

  if (auto resp = gdw::decode_alloc_resp(bytes); resp.ok()) {
    auto again = gdw::decode_alloc_resp(gdw::encode_alloc_resp(*resp));
    require(again.ok());
    require(again->envs == resp->envs && again->devices == resp->devices);
    require(again->cdi_devices == resp->cdi_devices && again->annotations == resp->annotations);
  }

  auto round_trip = gdw::base64_decode(gdw::base64_encode(bytes));
  require(round_trip.ok() && *round_trip == bytes);
  if (auto decoded = gdw::base64_decode(bytes); decoded.ok()) {
    require(gdw::base64_encode(*decoded) == bytes);
  }
  return 0;
}
