"""Interoperability: tfm models exported to the runtimes users deploy with: CTranslate2
(tfm.interop.ctranslate2) and Hugging Face Transformers' MarianMT (tfm.interop.marian)."""
