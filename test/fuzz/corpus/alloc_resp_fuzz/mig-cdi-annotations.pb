
 
NVIDIA_MIG_CONFIG_DEVICESall
B
NVIDIA_VISIBLE_DEVICES(MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e$
/dev/nvidiactl/dev/nvidiactlrw 
/dev/nvidia0/dev/nvidia0rwA
/dev/nvidia-caps/nvidia-cap12/dev/nvidia-caps/nvidia-cap12rA
/dev/nvidia-caps/nvidia-cap13/dev/nvidia-caps/nvidia-cap13r"_
$cdi.k8s.io/nvidia-device-plugin_5b8d7nvidia.com/gpu=MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e*9
7nvidia.com/gpu=MIG-9d2b5c1e-3f4a-5b6c-8d7e-0f1a2b3c4d5e