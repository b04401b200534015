"""The region flow path's benchmark and the training of its decision network, on generated scenes."""
