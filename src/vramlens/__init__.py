"""vramlens: will this model fit on my GPU, where did my memory go, and what should I change?"""

__version__ = "0.1.0"
