"""Packaged time-model profiles, one YAML per GPU (see decodecalc.timemodel)."""
