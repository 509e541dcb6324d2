"""The session bundle: the immutable on-disk evidence of one measured session
(`session_bundle.SessionBundle`) and its manifest of digests (`manifest`), from which the
TraceLake can always be rebuilt.
"""
