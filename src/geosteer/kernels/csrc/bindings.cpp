// Python bindings of the surface kernels (the last source: every function above is defined).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("key_features", &key_features, "key-side features");
    m.def("epilogue", &epilogue, "query-side epilogue");
    m.def("key_features_backward", &key_features_backward, "gradients of key_features");
    m.def("epilogue_backward", &epilogue_backward, "gradients of epilogue");
    m.def("low_rank_key_features", &low_rank_key_features, "rank-r key-side features");
    m.def("low_rank_epilogue", &low_rank_epilogue, "rank-r query-side epilogue");
    m.def("feature_flash", &feature_flash, "attention of key-side features, flash style");
}
