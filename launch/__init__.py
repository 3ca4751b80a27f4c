"""Starting and supervising a job's processes (imported as `adrun.launch`; never imports TensorFlow)."""
