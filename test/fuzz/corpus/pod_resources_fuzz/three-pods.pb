
‹
train-0mlq
workerg
nvidia.com/gpu+GPU-0650a168-e770-3ea8-8ac3-8a1d41970000::1(GPU-0650a168-e770-3ea8-8ac3-8a1d41970001	
sidecar
n
webdefault^
nginxB
nvidia.com/mig-1g.10gb(MIG-5c5a7ab8-4a1c-5f0e-8e3e-5b7a1d2c3e4f
rdma/hcanic-2
Q
infermlD
server:
nvidia.com/gpu(GPU-0650a168-e770-3ea8-8ac3-8a1d41970001