"""Documents: files whose markup, layout and timing are kept while their text is translated.

Each format is one module that reads a file into :class:`~tfm.documents.segments.Segment`
values (the text to translate, with its inline markup held apart) and writes the file back
with translated segments in their place; ``formats.py`` names the formats and picks one by
extension. What lies between segments (structure, code, attributes, timings) never reaches
the model and comes out as it went in.
"""
