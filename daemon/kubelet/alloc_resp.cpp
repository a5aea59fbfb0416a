// AllocResp: the device plugin's ContainerAllocateResponse as kubelet stored it (protobuf).
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <climits>

#include "deviceplugin_v1beta1.pb.h"
#include "kubelet/checkpoint.h"

namespace gdw {

namespace pb = gdw::deviceplugin::v1beta1;

Result<AllocResp> decode_alloc_resp(std::string_view protobuf_bytes) {
  if (protobuf_bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    return Error{"ContainerAllocateResponse of " + std::to_string(protobuf_bytes.size()) +
                 " bytes is larger than protobuf can parse"};
  }
  pb::ContainerAllocateResponse message;
  bool parsed = false;
  {
    // protobuf writes its own line to stderr for a non-UTF-8 string field; the caller
    // reports the failure once, with context, through its logger instead.
    google::protobuf::LogSilencer quiet;
    parsed = message.ParseFromArray(protobuf_bytes.data(), static_cast<int>(protobuf_bytes.size()));
  }
  // Truncation, bad wire types and non-UTF-8 strings fail alike; protobuf does not say which.
  if (!parsed) {
    return Error{"not a valid ContainerAllocateResponse (" + std::to_string(protobuf_bytes.size()) +
                 " bytes: truncated or malformed protobuf, or a string that is not UTF-8)"};
  }
  AllocResp resp;
  for (const auto& [key, value] : message.envs()) resp.envs.emplace(key, value);
  for (const auto& [key, value] : message.annotations()) resp.annotations.emplace(key, value);
  resp.devices.reserve(static_cast<std::size_t>(message.devices_size()));
  for (const auto& d : message.devices()) {
    resp.devices.push_back(DeviceSpec{d.container_path(), d.host_path(), d.permissions()});
  }
  resp.cdi_devices.reserve(static_cast<std::size_t>(message.cdi_devices_size()));
  for (const auto& c : message.cdi_devices()) resp.cdi_devices.push_back(c.name());
  return resp;
}

std::string encode_alloc_resp(const AllocResp& resp) {
  pb::ContainerAllocateResponse message;
  message.mutable_envs()->insert(resp.envs.begin(), resp.envs.end());
  message.mutable_annotations()->insert(resp.annotations.begin(), resp.annotations.end());
  for (const auto& d : resp.devices) {
    auto* spec = message.add_devices();
    spec->set_container_path(d.container_path);
    spec->set_host_path(d.host_path);
    spec->set_permissions(d.permissions);
  }
  for (const auto& name : resp.cdi_devices) message.add_cdi_devices()->set_name(name);

  // Map order is otherwise unspecified; fixtures and their checksums must be reproducible.
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace gdw
