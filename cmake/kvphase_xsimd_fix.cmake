# Debian 12's xsimd 8.1 exports target `xsimd` with INTERFACE_LINK_LIBRARIES "xtl" (a bare name,
# not a target), so every executable fails with "cannot find -lxtl". xsimd does not need xtl for
# anything kvphase uses, so clear the property unless a real xtl target exists.
if(TARGET xsimd AND NOT TARGET xtl)
  get_target_property(_kvphase_xsimd_links xsimd INTERFACE_LINK_LIBRARIES)
  if(_kvphase_xsimd_links STREQUAL "xtl")
    set_property(TARGET xsimd PROPERTY INTERFACE_LINK_LIBRARIES "")
  endif()
endif()
