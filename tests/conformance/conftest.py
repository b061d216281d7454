"""The conformance suites live in tests/conformance/suites/ as classes each backend's test module
subclasses (`class TestX(RetrieverConformance)` with its own `backend` fixture). They are imported
as `tests.conformance.suites.<role>` (tests/ is a namespace package on the rootdir), so pytest is told
to rewrite their asserts as it does a test module's."""

import pytest

pytest.register_assert_rewrite("tests.conformance.suites")
