"""The benchmark context's single-model methods: the Table 7 shape, published references, the protocol."""
