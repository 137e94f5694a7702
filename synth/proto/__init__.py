"""Protocol schemas shipped with synth (the Chakra execution-trace schema, ``et_def.proto``)."""
