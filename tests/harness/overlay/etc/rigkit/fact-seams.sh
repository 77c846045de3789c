# rigkit fact seams for the sandbox host (README "Test seams"; never present on a real rig).
# A container shares the CI machine's kernel, so `uname -r` and /sys/module/nvidia cannot say which
# kernel and module this host booted; fake-boot records both at boot and rigkit's KernelState fact
# reads them from here instead. Nothing else in the facts changes.
RIGKIT_KERNEL_RELEASE_FILE=/run/fake-kernel/release
RIGKIT_NVIDIA_MODULE_VERSION_FILE=/run/fake-gpu/module_version
