
B
NVIDIA_VISIBLE_DEVICES(GPU-a1b2c3d4-e5f6-4711-8899-aabbccddeeff$
/dev/nvidiactl/dev/nvidiactlrw&
/dev/nvidia-uvm/dev/nvidia-uvmrw 
/dev/nvidia1/dev/nvidia1rw