"""What every op family shares: loading the libraries (`library`, `gpu`), what the
registered OpDefs say (`op_info`), portable mode and its math (`portable`,
`portable_math`), when a wrapper builds its composite (`composite`), and the CPU's
instruction set (`cpu_info`)."""
