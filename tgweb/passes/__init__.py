"""Graph passes: dead-code elimination, elementwise fusion, buffer planning."""
