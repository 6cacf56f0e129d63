"""Static descriptions of models and GPUs (data, loaded lazily)."""
