"""Helpers the tests share: oracles, fakes, job configs, ways to run adrun. Test files import from
here and never from one another; fixtures stay in conftest.py files and call into this package."""
