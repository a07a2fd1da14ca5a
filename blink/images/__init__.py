"""Image intake (gathering, decoding, placing) and the checks that bound its cost."""
