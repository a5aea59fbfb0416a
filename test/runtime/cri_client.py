"""kubelet's side of the CRI, over gRPC, from cri_subset.proto compiled at test time.

Every call goes through `call()`, which times it, and turns a gRPC error into a CriError with
the runtime's own text (what kubelet would log and put in the pod's events).
"""

import importlib
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "cri_subset.proto")


def compile_proto(out_dir):
    """Generates cri_subset_pb2{,_grpc}.py into out_dir and imports them: (pb2, pb2_grpc)."""
    os.makedirs(out_dir, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + HERE, "--python_out=" + out_dir,
                        "--grpc_python_out=" + out_dir, PROTO], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("protoc failed on %s: %s" % (PROTO, r.stderr.strip()))
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return importlib.import_module("cri_subset_pb2"), importlib.import_module("cri_subset_pb2_grpc")


class CriError(Exception):
    def __init__(self, method, code, details):
        super().__init__("%s: %s: %s" % (method, code, details))
        self.method = method
        self.code = code
        self.details = details


class CriClient:
    def __init__(self, address, gen_dir, timeout=60):
        import grpc  # python3-grpcio
        self.grpc = grpc
        self.pb, pb_grpc = compile_proto(gen_dir)
        self.channel = grpc.insecure_channel("unix://" + address)
        self.stub = pb_grpc.RuntimeServiceStub(self.channel)
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def call(self, method, request, timeout=None):
        """(response, seconds). Raises CriError with the runtime's message."""
        start = time.monotonic()
        try:
            response = getattr(self.stub, method)(request, timeout=timeout or self.timeout)
        except self.grpc.RpcError as e:
            raise CriError(method, e.code().name if e.code() else "UNKNOWN", e.details() or str(e)) from None
        return response, time.monotonic() - start

    # Requests as kubelet builds them for a host-network, burstable pod.

    def version(self):
        return self.call("Version", self.pb.VersionRequest(version="v1"))[0]

    def sandbox_config(self, name, uid, namespace, cgroup_parent, log_dir):
        pb = self.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            log_directory=log_dir,
            labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
                    "io.kubernetes.pod.uid": uid},
            annotations={"kubernetes.io/config.source": "api"},
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD))))

    def run_pod_sandbox(self, config, handler):
        r, secs = self.call("RunPodSandbox", self.pb.RunPodSandboxRequest(config=config, runtime_handler=handler),
                            timeout=120)
        return r.pod_sandbox_id, secs

    def stop_pod_sandbox(self, sandbox_id):
        return self.call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))[1]

    def remove_pod_sandbox(self, sandbox_id):
        return self.call("RemovePodSandbox", self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))[1]

    def container_config(self, name, attempt, image, command, mounts, cpu_shares, cpuset_cpus, sandbox_config):
        pb = self.pb
        meta = sandbox_config.metadata
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt),
            image=pb.ImageSpec(image=image),
            command=command,
            envs=[pb.KeyValue(key="NVIDIA_VISIBLE_DEVICES", value="void")],
            mounts=[pb.Mount(container_path=c, host_path=h, readonly=ro) for c, h, ro in mounts],
            labels={"io.kubernetes.container.name": name, "io.kubernetes.pod.name": meta.name,
                    "io.kubernetes.pod.namespace": meta.namespace, "io.kubernetes.pod.uid": meta.uid},
            annotations={"io.kubernetes.container.restartCount": str(attempt)},
            log_path="%s/%d.log" % (name, attempt),
            linux=pb.LinuxContainerConfig(resources=self.resources(cpu_shares, cpuset_cpus)))

    def resources(self, cpu_shares, cpuset_cpus):
        # A burstable pod's score, as kubelet computes it for a small request (containerd's
        # restrict_oom_score_adj keeps it at or above containerd's own).
        kw = {"oom_score_adj": 999}
        if cpu_shares:
            kw["cpu_shares"] = cpu_shares
        if cpuset_cpus:
            kw["cpuset_cpus"] = cpuset_cpus
        return self.pb.LinuxContainerResources(**kw)

    def create_container(self, sandbox_id, config, sandbox_config):
        r, secs = self.call("CreateContainer", self.pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config))
        return r.container_id, secs

    def start_container(self, container_id):
        return self.call("StartContainer", self.pb.StartContainerRequest(container_id=container_id))[1]

    def stop_container(self, container_id, timeout=0):
        return self.call("StopContainer", self.pb.StopContainerRequest(container_id=container_id, timeout=timeout))[1]

    def remove_container(self, container_id):
        return self.call("RemoveContainer", self.pb.RemoveContainerRequest(container_id=container_id))[1]

    def container_status(self, container_id):
        return self.call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id))[0].status

    def update_resources(self, container_id, cpu_shares=0, cpuset_cpus=""):
        linux = self.pb.LinuxContainerResources(cpu_shares=cpu_shares, cpuset_cpus=cpuset_cpus)
        return self.call("UpdateContainerResources",
                         self.pb.UpdateContainerResourcesRequest(container_id=container_id, linux=linux))[1]

    def exec_sync(self, container_id, cmd, timeout=10):
        r, secs = self.call("ExecSync", self.pb.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=timeout),
                            timeout=timeout + 10)
        return r.exit_code, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"), secs
