# Safetensors reader/writer and MLX affine quantization.
redwing_test(safetensors_test SOURCES safetensors_test.cpp LIBS redwing_install LABELS unit)
redwing_test(quantize_test SOURCES quantize_test.cpp LIBS redwing_install LABELS unit)
