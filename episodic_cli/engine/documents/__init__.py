"""Reading files: formats, text slices, structure (headings, outlines, symbols), discovery."""
