"""What the job's processes send each other: tensor and value codecs, the zero-copy chunk
codec, and the gRPC plumbing (auth, TLS, channels, health). The messages are `ps_runtime.proto`."""
