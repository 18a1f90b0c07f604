// agent console (placeholder: the page replaces this file)
