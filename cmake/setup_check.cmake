# Runs scripts/setup.sh for the parts this configure builds (included from the top
# CMakeLists.txt before project(); KVSHARE_SETUP is check or install).
if(DEFINED KVSHARE_BUILD_TESTS AND NOT KVSHARE_BUILD_TESTS AND KVSHARE_BUILD_PYTHON)
  set(_kvshare_groups pylib)          # `pip install .`: library and extension only
elseif(KVSHARE_BUILD_PYTHON)
  set(_kvshare_groups build pylib)
else()
  set(_kvshare_groups build)
endif()
set(_kvshare_flags)
if(KVSHARE_SETUP STREQUAL "check")
  set(_kvshare_flags --check)
elseif(NOT KVSHARE_SETUP STREQUAL "install")
  message(FATAL_ERROR "KVSHARE_SETUP is '${KVSHARE_SETUP}'; expected check, install or off")
endif()
# The interpreter the Python extension is built for (scikit-build-core passes it).
set(_kvshare_env)
foreach(_var Python_EXECUTABLE Python3_EXECUTABLE)
  if(DEFINED ${_var} AND NOT _kvshare_env)
    set(_kvshare_env "KVSHARE_PYTHON=${${_var}}")
  endif()
endforeach()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${_kvshare_env}
          bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/setup.sh ${_kvshare_flags} ${_kvshare_groups}
  RESULT_VARIABLE _kvshare_rc)
if(NOT _kvshare_rc EQUAL 0)
  if(KVSHARE_SETUP STREQUAL "install")
    message(FATAL_ERROR "kvshare: scripts/setup.sh could not install the build dependencies; its message above says what to run.")
  endif()
  message(FATAL_ERROR
    "kvshare: build dependencies are missing (listed above by scripts/setup.sh). "
    "Install them (`bash scripts/setup.sh ${_kvshare_groups}` does it as root or with passwordless sudo), "
    "or configure with -DKVSHARE_SETUP=install to let configure run it, or -DKVSHARE_SETUP=off to skip this check.")
endif()
