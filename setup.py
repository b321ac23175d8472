from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
