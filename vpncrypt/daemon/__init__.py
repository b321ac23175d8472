"""Daemon-side building blocks: UAPI server, sd_notify, TUN, logging."""
